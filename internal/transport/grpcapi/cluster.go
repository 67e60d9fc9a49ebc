package grpcapi

import (
	"cmp"
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// ClusterView is what DescribeCluster reports besides the topics and
// groups, which the LogService reads itself.
type ClusterView struct {
	// Mode is "single" or "active-standby" (see DescribeClusterResponse).
	Mode      string
	Instances []*sharelogv1.ClusterInstance
	// Owner names a partition's owner and epoch ("" when none).
	Owner func(topicID string, partition int32) (id string, epoch int64)
	// Coordinator names a share group's coordinator and epoch.
	Coordinator func(group string) (id string, epoch int64)
	// Groups, when not nil, lists the share groups (else WithCluster's
	// groups function does).
	Groups []string
}

// ClusterSource reads the cluster view for one DescribeCluster call.
type ClusterSource func(ctx context.Context) (ClusterView, error)

// WithCluster sets what DescribeCluster reports: the view, and the share
// groups (their IDs). Without it DescribeCluster answers UNIMPLEMENTED.
func (s *LogService) WithCluster(view ClusterSource, groups func() ([]string, error)) *LogService {
	s.cluster, s.groups = view, groups
	return s
}

// DescribeCluster needs no permission of its own: every client needs it to
// route. As ListTopics and ListShareGroups do, it leaves out the topics
// and groups the caller may not DESCRIBE.
func (s *LogService) DescribeCluster(ctx context.Context, _ *sharelogv1.DescribeClusterRequest) (*sharelogv1.DescribeClusterResponse, error) {
	if s.cluster == nil {
		return nil, status.Error(codes.Unimplemented, "DescribeCluster is not served here")
	}
	view, err := s.cluster(ctx)
	if err != nil {
		return nil, err
	}
	topics, err := s.log.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	groups := view.Groups
	if groups == nil && s.groups != nil {
		if groups, err = s.groups(); err != nil {
			return nil, err
		}
	}
	out := &sharelogv1.DescribeClusterResponse{Mode: view.Mode, Instances: slices.Clone(view.Instances)}
	slices.SortFunc(out.Instances, func(a, b *sharelogv1.ClusterInstance) int { return cmp.Compare(a.InstanceId, b.InstanceId) })
	slices.SortFunc(topics, func(a, b broker.Topic) int { return cmp.Compare(a.Info.Name, b.Info.Name) })
	for _, t := range topics {
		if !s.guard.Allowed(ctx, authz.Describe, authz.Topic, t.Info.Name) {
			continue
		}
		for p := range t.Info.Partitions {
			id, epoch := view.Owner(t.Info.ID, p)
			out.Partitions = append(out.Partitions, &sharelogv1.PartitionOwner{Topic: t.Info.Name, TopicId: t.Info.ID,
				Partition: p, OwnerId: id, Epoch: epoch})
		}
	}
	slices.Sort(groups)
	for _, g := range slices.Compact(groups) {
		if !s.guard.Allowed(ctx, authz.Describe, authz.Group, g) {
			continue
		}
		id, epoch := view.Coordinator(g)
		out.Groups = append(out.Groups, &sharelogv1.GroupCoordinator{GroupId: g, CoordinatorId: id, Epoch: epoch})
	}
	return out, nil
}
