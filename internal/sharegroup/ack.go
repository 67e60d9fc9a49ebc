package sharegroup

import (
	"context"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/sessioncache"
)

// ackOutcome is one partition entry's acknowledgement result.
type ackOutcome struct {
	has  bool // the entry carried batches
	code apierr.Reason
	msg  string
}

// processAcks applies the acknowledgement batches of every entry,
// each partition atomically, and waits once for all their state writes:
// concurrent requests share the fsync (group commit). A partition whose
// write failed is rolled back and reports KAFKA_STORAGE_ERROR.
func (m *Manager) processAcks(s *session, g *group, es []PartitionEntry, named []namedPart) []ackOutcome {
	out := make([]ackOutcome, len(es))
	type pending struct {
		i int
		r ackResult
	}
	var pend []pending
	var last uint64
	for i := range es {
		e := &es[i]
		if len(e.Batches) == 0 {
			continue
		}
		out[i].has = true
		if !named[i].ok {
			out[i].code, out[i].msg = apierr.UnknownTopicOrPartition, "topic or partition does not exist"
			continue
		}
		if named[i].away != "" {
			out[i].code, out[i].msg = apierr.NotOwner, notHere(named[i].away)
			continue
		}
		sp := g.partition(named[i].topicID, e.Topic, e.Partition, true)
		if sp == nil {
			if o := m.away(named[i].topicID, e.Topic, e.Partition); o != "" {
				out[i].code, out[i].msg = apierr.NotOwner, notHere(o) // moved a moment ago
			} else {
				out[i].code, out[i].msg = apierr.UnknownTopicOrPartition, "share group was deleted"
			}
			continue
		}
		r := sp.ack(s, e.Batches)
		out[i].code, out[i].msg = r.code, r.msg
		if r.ticket > 0 {
			pend = append(pend, pending{i, r})
			last = max(last, r.ticket)
		}
	}
	if last > 0 {
		// Once the last ticket is settled so are the others, but each may
		// have failed on its own: a failure is not sticky.
		_ = m.state.Wait(last)
		for _, p := range pend {
			if err := m.state.Wait(p.r.ticket); err != nil {
				p.r.sp.rollback(p.r.undo, s)
				out[p.i].code, out[p.i].msg = apierr.KafkaStorageError, storageErrMsg(err)
			}
		}
	}
	return out
}

// ShareAcknowledge serves ShareAcknowledge.
func (m *Manager) ShareAcknowledge(ctx context.Context, req AckRequest) (AckResponse, error) {
	if !m.enter() {
		return AckResponse{}, ErrClosed
	}
	defer m.leave()
	if err := validateAck(&req); err != nil {
		return AckResponse{}, err
	}
	if req.Epoch == 0 {
		return AckResponse{}, &apierr.Error{Reason: apierr.InvalidShareSessionEpoch, Message: "ShareAcknowledge cannot open a share session (epoch 0)"}
	}
	named, err := m.resolveAll(ctx, req.Partitions)
	if err != nil {
		return AckResponse{}, err
	}
	key := sessioncache.Key{Group: req.GroupID, Member: req.MemberID}
	var s *session
	if req.Epoch > 0 {
		s, err = m.sessions.Admit(ctx, key, req.Epoch, nil)
	} else {
		s, err = m.sessions.AdmitClose(ctx, key)
	}
	if err != nil {
		return AckResponse{}, m.sessionError(err)
	}
	defer m.sessions.Done(s)
	s.Mu.Lock()
	g := s.State.g
	s.Mu.Unlock()
	acks := m.processAcks(s, g, req.Partitions, named)
	if req.Epoch == -1 {
		m.sessions.End(s, sessioncache.EndClosed)
	}
	resp := AckResponse{AcquisitionLockTimeoutMs: g.config().lockMs, Partitions: make([]PartitionAckResult, len(req.Partitions))}
	for i := range req.Partitions {
		r := PartitionAckResult{TopicPartition: req.Partitions[i].TopicPartition, TopicID: resultTopicID(&req.Partitions[i], named[i]),
			ErrorCode: acks[i].code, ErrorMessage: acks[i].msg}
		if !named[i].ok {
			r.ErrorCode, r.ErrorMessage = apierr.UnknownTopicOrPartition, "topic or partition does not exist"
		}
		resp.Partitions[i] = r
	}
	return resp, nil
}
