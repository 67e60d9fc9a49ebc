package shareconsumer

import (
	"context"
	"errors"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reason returns the google.rpc.ErrorInfo reason of a gRPC status error
// (e.g. "SHARE_SESSION_NOT_FOUND"), or "" if it carries none. Compare it
// with the constants of package apierr, as apierr.Reason(Reason(err)).
func Reason(err error) string {
	return errorInfo(err).GetReason()
}

func errorInfo(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// outcome says what a failed share-session request means.
type outcome int

const (
	// outcomeRefused: the server refused the request; nothing changed.
	outcomeRefused outcome = iota
	// outcomeSessionNotFound: no session any more (server restart, idle
	// eviction): nothing changed, the old session's records were released.
	outcomeSessionNotFound
	// outcomeEpochMismatch: the session exists but expects another epoch;
	// nothing changed.
	outcomeEpochMismatch
	// outcomeUncertain: the request may or may not have been admitted (a
	// transport failure, a cancelled call, an internal error).
	outcomeUncertain
)

type failure struct {
	outcome outcome
	// retry: worth retrying after a backoff (transient).
	retry bool
}

// classify sorts a share-session request's error. ctx is the call's parent
// context: a failure caused by it ending is not retried.
//
// A status carrying a sharelog ErrorInfo is a request-level error, and such
// a call changed nothing: the request was not
// admitted. Anything else (connection lost, deadline, cancellation) leaves
// it unknown whether the server admitted the request.
func classify(ctx context.Context, err error) failure {
	retry := !ended(ctx)
	if info := errorInfo(err); info != nil && info.GetDomain() == apierr.Domain {
		switch apierr.Reason(info.GetReason()) {
		case apierr.ShareSessionNotFound:
			return failure{outcome: outcomeSessionNotFound}
		case apierr.InvalidShareSessionEpoch:
			return failure{outcome: outcomeEpochMismatch}
		case apierr.ShareSessionLimitReached, apierr.Unavailable:
			return failure{outcome: outcomeRefused, retry: retry}
		case apierr.NotOwner, apierr.OwnerUnreachable:
			// Ownership moved or the owner is gone: nothing was applied;
			// retried after the owners are read again (ownerFailed marks
			// the view stale), not returned to the application.
			return failure{outcome: outcomeRefused, retry: retry}
		case apierr.OutcomeUnknown:
			// Sent on by an instance to the owner and the answer lost:
			// perhaps applied, and resent unchanged (acknowledgements are
			// idempotent by offset).
			return failure{outcome: outcomeUncertain, retry: retry}
		case apierr.Internal:
			return failure{outcome: outcomeUncertain}
		}
		return failure{outcome: outcomeRefused}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded, codes.Canceled:
		// Transport failures, our per-request timeout (retried), or the
		// caller's context ending (not retried).
		return failure{outcome: outcomeUncertain, retry: retry}
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return failure{outcome: outcomeUncertain}
	}
	return failure{outcome: outcomeRefused}
}

// ended reports whether ctx is done or past its deadline (a call can fail
// with DEADLINE_EXCEEDED, cut by the server, just before ctx's own timer
// fires).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// errRetryNow makes the request loop retry at once (the session was reset).
var errRetryNow = errors.New("retry now")
