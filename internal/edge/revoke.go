package edge

import (
	"context"
	"crypto/sha256"
	"errors"

	"google.golang.org/grpc/metadata"

	"github.com/sharelog/sharelog/apierr"
)

// Revocation is complete (docs/principals.md): a call admitted with a
// token of the tokens file runs under a context that ends when a reload
// takes the token out of the table. Change streams and long polls (Fetch,
// ShareFetch with a wait) then end at once, with UNAUTHENTICATED, instead
// of delivering to a credential that no longer exists.

// errTokenRevoked is the cause of a call's context ended by a reload.
var errTokenRevoked = errors.New("the call's token was removed from the tokens file")

// revokedError is what a call ended by a revocation answers.
func revokedError() error {
	return apierr.New(apierr.Unauthenticated, "the token was revoked (removed from the tokens file)")
}

// callWatch is one running call bound to its token.
type callWatch struct{ cancel context.CancelCauseFunc }

// bearerSum is the SHA-256 of the call's bearer token when it is one of
// the tokens file, else nil. Only the health calls, which the gate does not
// authenticate, need it; every other call has it from admit.
func (a *Authenticator) bearerSum(ctx context.Context) *[sha256.Size]byte {
	if !a.TokensEnabled() {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("authorization")
	if len(v) != 1 {
		return nil
	}
	_, sum, _ := a.identifyCall(v[0])
	return sum
}

// holds reports whether the table has the token whose SHA-256 is sum.
func (a *Authenticator) holds(sum [sha256.Size]byte) bool {
	tokens := a.table.Load()
	if tokens == nil {
		return false
	}
	for _, t := range *tokens {
		if t.sum == sum {
			return true
		}
	}
	return false
}

// bind returns ctx ended (cause errTokenRevoked) when the token whose
// SHA-256 is sum leaves the table, and the function that releases the
// binding once the call is over.
func (a *Authenticator) bind(ctx context.Context, sum [sha256.Size]byte) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &callWatch{cancel: cancel}
	a.callsMu.Lock()
	if a.calls == nil {
		a.calls = make(map[[sha256.Size]byte]map[*callWatch]struct{})
	}
	set := a.calls[sum]
	if set == nil {
		set = make(map[*callWatch]struct{})
		a.calls[sum] = set
	}
	set[w] = struct{}{}
	a.callsMu.Unlock()
	// A reload between authentication and here stored its table before
	// scanning the calls: either that scan saw w, or this check sees the
	// new table.
	if !a.holds(sum) {
		cancel(errTokenRevoked)
	}
	return ctx, func() {
		a.callsMu.Lock()
		if s := a.calls[sum]; s != nil {
			delete(s, w)
			if len(s) == 0 {
				delete(a.calls, sum)
			}
		}
		a.callsMu.Unlock()
		cancel(context.Canceled)
	}
}

// endRevoked ends every running call whose token the current table no
// longer has. It runs after each table swap.
func (a *Authenticator) endRevoked() {
	a.callsMu.Lock()
	n := 0
	for sum, set := range a.calls {
		if a.holds(sum) {
			continue
		}
		for w := range set {
			w.cancel(errTokenRevoked)
			n++
		}
		delete(a.calls, sum)
	}
	a.callsMu.Unlock()
	if n > 0 {
		a.log.Info("auth tokens file: calls of removed tokens ended", "calls", n)
	}
}

// revoked reports whether ctx (from bind) ended by a revocation.
func revoked(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errTokenRevoked) }
