package kafkawire

import (
	"context"

	"github.com/sharelog/sharelog/internal/authz"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Coordinator key types.
const (
	coordinatorGroup = 0
	coordinatorTxn   = 1
	coordinatorShare = 2
)

// handleFindCoordinator answers the coordinator of group and share keys:
// this node, or in cluster mode the instance that coordinates the group
// (Cluster.Coordinator; COORDINATOR_NOT_AVAILABLE while none is live);
// a transactional id's (key type 1) is this node when it serves
// transactions on a single node (Config.Txn), in cluster mode the
// instance that coordinates the id (docs/kafka.md "Transactions"), as
// Kafka with DESCRIBE on the transactional id; without them
// INVALID_REQUEST, which a client takes as final
// (COORDINATOR_NOT_AVAILABLE would have a transactional producer retry
// without end). As Kafka, a
// group key needs DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED per
// key otherwise; READ implies DESCRIBE, so a member of the group may),
// which clients expect (docs/kafka.md "Permissions").
func (l *Listener) handleFindCoordinator(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	code := int16(0)
	var msg *string
	switch req.CoordinatorType {
	case coordinatorGroup, coordinatorShare:
	case coordinatorTxn:
		if l.servesTxn() {
			break
		}
		code = kerr.InvalidRequest.Code
		m := "transactions are not served by this listener yet (docs/kafka.md)"
		msg = &m
	default:
		code = kerr.InvalidRequest.Code
		m := "unknown coordinator type"
		msg = &m
	}
	var bs Brokers
	if code == 0 {
		bs = l.brokers(ctx)
	}
	nodeOf := func(key string) (int32, string, int32, int16, *string) {
		if code != 0 {
			return -1, "", -1, code, msg
		}
		if req.CoordinatorType == coordinatorTxn {
			if !l.allowed(ctx, authz.Describe, authz.TransactionalID, key) {
				m := "DESCRIBE on the transactional id is required"
				return -1, "", -1, kerr.TransactionalIDAuthorizationFailed.Code, &m
			}
		} else if !l.allowed(ctx, authz.Describe, authz.Group, key) {
			m := "DESCRIBE on the group is required"
			return -1, "", -1, kerr.GroupAuthorizationFailed.Code, &m
		}
		node := int32(nodeID)
		if l.cfg.Cluster != nil {
			node = l.cfg.Cluster.Coordinator(ctx, req.CoordinatorType, key)
		}
		b, ok := brokerOf(bs, node)
		if !ok {
			m := "the group has no live coordinator right now; retry"
			return -1, "", -1, kerr.CoordinatorNotAvailable.Code, &m
		}
		return b.NodeID, b.Host, b.Port, 0, nil
	}
	if req.GetVersion() < 4 {
		resp.NodeID, resp.Host, resp.Port, resp.ErrorCode, resp.ErrorMessage = nodeOf(req.CoordinatorKey)
		return resp, nil
	}
	for _, k := range req.CoordinatorKeys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key = k
		c.NodeID, c.Host, c.Port, c.ErrorCode, c.ErrorMessage = nodeOf(k)
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp, nil
}
