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
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/sharegroup"
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
		{"storage", fmt.Errorf("/data/x: %w", logstore.ErrStorage), codes.Unavailable, apierr.KafkaStorageError,
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
