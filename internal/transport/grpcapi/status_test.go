package grpcapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/sharegroup"
	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Every reason has a code, and the HTTP column is what the REST gateway
// answers for that code.
func TestReasonTableIsComplete(t *testing.T) {
	for _, r := range apierr.Reasons() {
		s, ok := StatusOf(r)
		if assert.True(t, ok, "reason %s has no status", r) {
			assert.Equal(t, runtime.HTTPStatusFromCode(s.Code), s.HTTP, "HTTP status of %s", r)
		}
	}
	assert.Len(t, reasonStatus, len(apierr.Reasons()), "the table holds only known reasons")
}

// docs/errors.md documents the same reason → gRPC code → HTTP table.
func TestReasonTableMatchesDocs(t *testing.T) {
	f, err := os.Open("../../../docs/errors.md")
	require.NoError(t, err)
	defer f.Close()
	type row struct{ code, http string }
	rows := map[string]row{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) < 5 {
			continue
		}
		reason := strings.TrimSpace(cells[1])
		if !strings.HasPrefix(reason, "`") || !strings.HasSuffix(reason, "`") || strings.Count(reason, "`") != 2 {
			continue // a heading, a separator, or a qualified row such as "(body too large)"
		}
		rows[strings.Trim(reason, "`")] = row{strings.Trim(strings.TrimSpace(cells[2]), "`"), strings.TrimSpace(cells[3])}
	}
	require.NoError(t, sc.Err())
	for _, r := range apierr.Reasons() {
		s, _ := StatusOf(r)
		got, ok := rows[string(r)]
		if !assert.True(t, ok, "docs/errors.md has no row for %s", r) {
			continue
		}
		assert.Equal(t, code.Code_name[int32(s.Code)], got.code, "gRPC code of %s in docs/errors.md", r)
		assert.Equal(t, strconv.Itoa(s.HTTP), got.http, "HTTP status of %s in docs/errors.md", r)
	}
}

func TestErrorsInterceptor(t *testing.T) {
	var logged strings.Builder
	x := Errors{Log: slog.New(slog.NewTextHandler(&logged, nil))}
	already := status.Error(codes.Unauthenticated, "no token")
	tests := []struct {
		name   string
		err    error
		code   codes.Code
		reason apierr.Reason // "" = no ErrorInfo
		msg    string
		md     map[string]string
	}{
		{"domain error", &apierr.Error{Reason: apierr.InvalidShareSessionEpoch, Message: "expected 3",
			Metadata: map[string]string{"expected_epoch": "3"}},
			codes.FailedPrecondition, apierr.InvalidShareSessionEpoch, "expected 3", map[string]string{"expected_epoch": "3"}},
		{"wrapped domain error", fmt.Errorf("ctx: %w", apierr.New(apierr.GroupIDNotFound, "no group")),
			codes.NotFound, apierr.GroupIDNotFound, "no group", nil},
		{"new reason", apierr.New(apierr.NotOwner, "elsewhere"), codes.Unavailable, apierr.NotOwner, "elsewhere", nil},
		{"unknown reason keeps its name, code INTERNAL", apierr.New("MADE_UP", "x"), codes.Internal, "MADE_UP", "x", nil},
		{"status passes through", already, codes.Unauthenticated, "", "no token", nil},
		{"cancelled", context.Canceled, codes.Canceled, "", "the call was cancelled", nil},
		{"deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "", "the call's deadline passed", nil},
		{"share groups closed", sharegroup.ErrClosed, codes.Unavailable, apierr.Unavailable, "the server is shutting down", nil},
		{"store closed", logstore.ErrClosed, codes.Unavailable, apierr.Unavailable, "the server is shutting down", nil},
		{"unknown topic", fmt.Errorf("topic x: %w", logstore.ErrUnknownTopic), codes.NotFound, apierr.UnknownTopicOrPartition, "", nil},
		{"topic exists", logstore.ErrTopicExists, codes.AlreadyExists, apierr.TopicAlreadyExists, "", nil},
		{"store invalid argument", logstore.ErrInvalidArgument, codes.InvalidArgument, apierr.InvalidRequest, "", nil},
		{"out of range", logstore.ErrOffsetOutOfRange, codes.OutOfRange, apierr.OffsetOutOfRange, "", nil},
		{"fenced append", fmt.Errorf("append t-0: %w", sljs.ErrFenced), codes.Unavailable, apierr.NotOwner,
			"this instance is no longer the owner of the partition; retry", nil},
		{"storage", fmt.Errorf("/data/x: %w", logstore.ErrStorage), codes.Unavailable, apierr.KafkaStorageError,
			"the partition's storage is failing or offline; retry later (the server log has the details)", nil},
		{"offline", fmt.Errorf("t-0: %w", logstore.ErrOffline), codes.Unavailable, apierr.KafkaStorageError,
			"the partition's storage is failing or offline; retry later (the server log has the details)", nil},
		{"corrupt", fmt.Errorf("/data/x: %w", logstore.ErrCorrupt), codes.DataLoss, apierr.CorruptMessage,
			"stored data failed its checksum; the server log has the details", nil},
		{"internal is masked", errors.New("open /secret/path: permission denied"), codes.Internal, apierr.Internal, "internal error", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := x.Unary(context.Background(), nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
				return nil, tt.err
			})
			checkStatus(t, err, tt.code, tt.reason, tt.msg, tt.md)
			serr := x.Stream(nil, fakeStream{}, &grpc.StreamServerInfo{}, func(any, grpc.ServerStream) error { return tt.err })
			checkStatus(t, serr, tt.code, tt.reason, tt.msg, tt.md)
		})
	}
	assert.Contains(t, logged.String(), "/secret/path", "the masked detail is logged")
	assert.Contains(t, logged.String(), "level=WARN msg=\"storage error\"", "a failing partition is a warning")

	resp, err := x.Unary(context.Background(), nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) { return "ok", nil })
	assert.NoError(t, err)
	assert.Equal(t, "ok", resp)
}

func checkStatus(t *testing.T, err error, c codes.Code, reason apierr.Reason, msg string, md map[string]string) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status: %v", err)
	assert.Equal(t, c, st.Code())
	if msg != "" {
		assert.Equal(t, msg, st.Message())
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if reason == "" {
		assert.Nil(t, info, "no ErrorInfo")
		return
	}
	require.NotNil(t, info, "ErrorInfo")
	assert.Equal(t, string(reason), info.GetReason())
	assert.Equal(t, apierr.Domain, info.GetDomain())
	assert.Equal(t, md, info.GetMetadata())
}

type fakeStream struct{ grpc.ServerStream }

func (fakeStream) Context() context.Context { return context.Background() }

// A masked error names the call's trace id, so the operator finds the log.
func TestInternalCarriesTraceID(t *testing.T) {
	var logged strings.Builder
	x := Errors{Log: slog.New(slog.NewTextHandler(&logged, nil))}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4}})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	_, err := x.Unary(ctx, nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
		return nil, errors.New("disk says no")
	})
	checkStatus(t, err, codes.Internal, apierr.Internal, "internal error; trace id "+sc.TraceID().String(), nil)
	assert.Contains(t, logged.String(), "trace_id="+sc.TraceID().String())
}

// The proto's per-partition ErrorCode numbers Kafka's codes, so a domain
// outcome (an apierr.Reason) is a cast: every value of the enum is the
// Kafka code of a reason named after it (ERROR_CODE_<reason>), except
// UNKNOWN_SERVER_ERROR (INTERNAL) and NOT_LEADER_OR_FOLLOWER (NOT_OWNER,
// a partition served by another instance).
func TestProtoErrorCodesAreKafkaCodes(t *testing.T) {
	alias := map[string]apierr.Reason{"UNKNOWN_SERVER_ERROR": apierr.Internal, "NOT_LEADER_OR_FOLLOWER": apierr.NotOwner, "NONE": apierr.None}
	for v, name := range sharelogv1.ErrorCode_name {
		kafkaName := strings.TrimPrefix(name, "ERROR_CODE_")
		r, ok := alias[kafkaName]
		if !ok {
			r = apierr.Reason(kafkaName)
		}
		assert.Equal(t, sharelogv1.ErrorCode(v), codeToProto(r), "%s", name)
		assert.Equal(t, r, apierr.ReasonOfKafkaCode(int16(v)), "%s", name)
	}
	assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_SERVER_ERROR, codeToProto("MADE_UP"))
}

func TestFromStatusIsStatusReversed(t *testing.T) {
	e := &apierr.Error{Reason: apierr.OwnerUnreachable, Message: "the owner did not answer", Metadata: map[string]string{"k": "v"}}
	back := FromStatus(Status(e).Err())
	assert.Equal(t, e, back)
	assert.Equal(t, apierr.RequestTimedOut, apierr.ReasonOf(FromStatus(status.Error(codes.DeadlineExceeded, "late"))))
	plain := status.Error(codes.Internal, "no info")
	assert.Equal(t, plain, FromStatus(plain))
	assert.NoError(t, FromStatus(nil))
}
