package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/sharegroup"
	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Every sentinel a domain or storage package returns has its reason here,
// wrapped as the stores wrap them; the messages that would leak a path or
// a cause are generic.
func TestErrorOfSentinels(t *testing.T) {
	domain := &apierr.Error{Reason: apierr.InvalidShareSessionEpoch, Message: "expected 3", Metadata: map[string]string{"expected_epoch": "3"}}
	tests := []struct {
		name   string
		err    error
		reason apierr.Reason
		msg    string // "" = the error's own text
	}{
		{"domain error as it is", fmt.Errorf("ctx: %w", domain), apierr.InvalidShareSessionEpoch, "expected 3"},
		{"share groups closed", sharegroup.ErrClosed, apierr.Unavailable, "the server is shutting down"},
		{"wrapped share groups closed", fmt.Errorf("fetch: %w", sharegroup.ErrClosed), apierr.Unavailable, "the server is shutting down"},
		{"store closed", fmt.Errorf("append: %w", logstore.ErrClosed), apierr.Unavailable, "the server is shutting down"},
		{"unknown topic", fmt.Errorf("topic x: %w", logstore.ErrUnknownTopic), apierr.UnknownTopicOrPartition, ""},
		{"topic exists", logstore.ErrTopicExists, apierr.TopicAlreadyExists, ""},
		{"invalid argument", fmt.Errorf("partitions 0: %w", logstore.ErrInvalidArgument), apierr.InvalidRequest, ""},
		{"offset out of range", logstore.ErrOffsetOutOfRange, apierr.OffsetOutOfRange, ""},
		{"fenced append", fmt.Errorf("append t-0: %w", sljs.ErrFenced), apierr.NotOwner,
			"this instance is no longer the owner of the partition; retry"},
		{"storage", fmt.Errorf("/data/x: %w", logstore.ErrStorage), apierr.KafkaStorageError,
			"the partition's storage is failing or offline; retry later (the server log has the details)"},
		{"offline", fmt.Errorf("t-0: %w", logstore.ErrOffline), apierr.KafkaStorageError,
			"the partition's storage is failing or offline; retry later (the server log has the details)"},
		{"corrupt", fmt.Errorf("/data/x: %w", logstore.ErrCorrupt), apierr.CorruptMessage,
			"stored data failed its checksum; the server log has the details"},
		{"cancelled", fmt.Errorf("read: %w", context.Canceled), apierr.RequestTimedOut, "the call was cancelled"},
		{"deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), apierr.RequestTimedOut, "the call's deadline passed"},
		{"anything else is masked", errors.New("open /secret/path: permission denied"), apierr.Internal, "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := broker.ErrorOf(tt.err)
			require.NotNil(t, e)
			assert.Equal(t, tt.reason, e.Reason)
			assert.Equal(t, tt.reason, broker.ReasonOf(tt.err))
			want := tt.msg
			if want == "" {
				want = tt.err.Error()
			}
			assert.Equal(t, want, e.Message)
		})
	}
	assert.Same(t, domain, broker.ErrorOf(fmt.Errorf("ctx: %w", domain)), "metadata and all")
	assert.ErrorIs(t, fmt.Errorf("x: %w", sharegroup.ErrClosed), sharegroup.ErrClosed, "still a sentinel")
}

func TestErrorOfNilAndReasonless(t *testing.T) {
	assert.Nil(t, broker.ErrorOf(nil))
	assert.Equal(t, apierr.None, broker.ReasonOf(nil))
	assert.Equal(t, apierr.Internal, broker.ReasonOf(&apierr.Error{Message: "no reason"}), "an error is never NONE")
	assert.Equal(t, apierr.Reason("MADE_UP"), broker.ReasonOf(apierr.New("MADE_UP", "x")), "kept: the transport answers it as INTERNAL")
}
