package grpcapi

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// Without a coordinator (cluster mode, for now) every call answers
// FAILED_PRECONDITION with the reason given.
func TestConsumerGroupServiceUnserved(t *testing.T) {
	s := NewConsumerGroupService(nil, "not in cluster mode yet", nil)
	ctx := context.Background()
	calls := map[string]func() error{
		"list": func() error { _, err := s.ListConsumerGroups(ctx, &sharelogv1.ListConsumerGroupsRequest{}); return err },
		"describe": func() error {
			_, err := s.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: "g"})
			return err
		},
		"fetch":  func() error { _, err := s.FetchOffsets(ctx, &sharelogv1.FetchOffsetsRequest{Group: "g"}); return err },
		"commit": func() error { _, err := s.CommitOffsets(ctx, &sharelogv1.CommitOffsetsRequest{Group: "g"}); return err },
		"alter":  func() error { _, err := s.AlterOffsets(ctx, &sharelogv1.AlterOffsetsRequest{Group: "g"}); return err },
		"delete": func() error {
			_, err := s.DeleteConsumerGroup(ctx, &sharelogv1.DeleteConsumerGroupRequest{Group: "g"})
			return err
		},
	}
	for name, call := range calls {
		st, _ := status.FromError(call())
		assert.Equal(t, codes.FailedPrecondition, st.Code(), name)
		assert.Equal(t, "not in cluster mode yet", st.Message(), name)
	}
}
