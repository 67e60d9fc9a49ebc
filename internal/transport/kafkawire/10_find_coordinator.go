package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Coordinator key types.
const (
	coordinatorGroup = 0
	coordinatorTxn   = 1
	coordinatorShare = 2
)

// handleFindCoordinator answers this node for group and share keys;
// transactions are not served (COORDINATOR_NOT_AVAILABLE).
func (l *Listener) handleFindCoordinator(_ context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	code := int16(0)
	var msg *string
	switch req.CoordinatorType {
	case coordinatorGroup, coordinatorShare:
	case coordinatorTxn:
		code = kerr.CoordinatorNotAvailable.Code
		m := "transactions are not supported"
		msg = &m
	default:
		code = kerr.InvalidRequest.Code
		m := "unknown coordinator type"
		msg = &m
	}
	nodeOf := func() (int32, string, int32) {
		if code != 0 {
			return -1, "", -1
		}
		return nodeID, l.host, l.port
	}
	if req.GetVersion() < 4 {
		resp.ErrorCode, resp.ErrorMessage = code, msg
		resp.NodeID, resp.Host, resp.Port = nodeOf()
		return resp, nil
	}
	for _, k := range req.CoordinatorKeys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.ErrorCode, c.ErrorMessage = k, code, msg
		c.NodeID, c.Host, c.Port = nodeOf()
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp, nil
}
