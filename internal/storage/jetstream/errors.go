package jetstream

import (
	"context"
	"errors"
	"fmt"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// ErrFenced: an append carried the last sequence this instance knew for the
// partition and the stream had moved on — another writer appended since.
// The caller treats it as "no longer the partition's owner"; nothing of the
// rejected batch was stored. It is the log store's sentinel, so that the
// domain maps it without knowing the backend.
var ErrFenced = logstore.ErrFenced

// API error codes sharelog tests for.
const (
	// CodeWrongLastSequence: an expected-last-sequence check failed.
	CodeWrongLastSequence njs.ErrorCode = 10071
	// CodeWrongLastSequenceConstant: the same on a replicated stream for a
	// per-subject check (KV CAS).
	CodeWrongLastSequenceConstant njs.ErrorCode = 10164
	// CodeNoMessageFound: a get of a sequence that is not stored.
	CodeNoMessageFound njs.ErrorCode = 10037
	// CodeStreamNotFound: the stream does not exist.
	CodeStreamNotFound njs.ErrorCode = 10059
)

// APICode returns the JetStream API error code of err, or 0.
func APICode(err error) njs.ErrorCode {
	var apiErr *njs.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode
	}
	return 0
}

// IsWrongLastSequence reports whether err is a failed expected-sequence
// check (an append fence or a KV CAS).
func IsWrongLastSequence(err error) bool {
	c := APICode(err)
	return c == CodeWrongLastSequence || c == CodeWrongLastSequenceConstant
}

// Wrap returns err with what was being done, wrapping storage as the
// sentinel the caller's package uses for "the storage failed" — unless err
// is the caller's own cancellation, which is returned as it is.
func Wrap(ctx context.Context, op string, err error, storage error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w (%w)", op, err, storage)
}
