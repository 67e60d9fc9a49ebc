package app

import (
	"context"
	"time"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
)

// singleInstanceID names the one instance of the file store.
const singleInstanceID = "local"

// singleView is DescribeCluster in file mode: this instance owns
// everything, at epoch 0.
func (s *Server) singleView(context.Context) (grpcapi.ClusterView, error) {
	owner := func(string, int32) (string, int64) { return singleInstanceID, 0 }
	return grpcapi.ClusterView{
		Mode:        ModeSingle,
		Instances:   []*sharelogv1.ClusterInstance{{InstanceId: singleInstanceID, GrpcAddress: s.GRPCAddr(), HttpAddress: s.HTTPAddr()}},
		Owner:       owner,
		Coordinator: func(string) (string, int64) { return singleInstanceID, 0 },
	}, nil
}

// activeView is DescribeCluster on the active instance of phase 1 (a
// standby forwards the call here): the live instances from their
// heartbeats, and this instance owning everything at the epoch its term
// began at.
func (n *clusterNode) activeView(ctx context.Context, epoch uint64) (grpcapi.ClusterView, error) {
	n.mu.RLock()
	lease, self := n.lease, n.self
	n.mu.RUnlock()
	var members []cluster.Member
	if lease != nil {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		if members, err = lease.LiveMembers(ctx); err != nil {
			return grpcapi.ClusterView{}, ownerUnreachableErr("cannot read the cluster members from NATS: " + err.Error())
		}
	}
	seen := false
	out := grpcapi.ClusterView{Mode: ModeActiveStandby}
	for _, m := range members {
		seen = seen || m.ID == self.ID
		out.Instances = append(out.Instances, &sharelogv1.ClusterInstance{InstanceId: m.ID, GrpcAddress: m.Addr, HttpAddress: m.HTTPAddr})
	}
	if !seen { // this instance serves the call, whether or not its heartbeat was read
		out.Instances = append(out.Instances, &sharelogv1.ClusterInstance{InstanceId: self.ID, GrpcAddress: self.Addr, HttpAddress: self.HTTPAddr})
	}
	e := int64(epoch)
	out.Owner = func(string, int32) (string, int64) { return self.ID, e }
	out.Coordinator = func(string) (string, int64) { return self.ID, e }
	return out, nil
}
