package sharegroup

import (
	"fmt"
	"unicode/utf8"

	"github.com/sharelog/sharelog/apierr"
)

func invalidRequest(format string, args ...any) *apierr.Error {
	return &apierr.Error{Reason: apierr.InvalidRequest, Message: fmt.Sprintf(format, args...)}
}

func validGroupID(id string) error {
	if n := utf8.RuneCountInString(id); n < 1 || n > maxGroupIDLen {
		return invalidRequest("group_id must have 1 to %d characters", maxGroupIDLen)
	}
	return nil
}

// ValidGroupID reports whether id can name a share group (the error is
// the INVALID_REQUEST every call with such an ID answers).
func ValidGroupID(id string) error { return validGroupID(id) }

func validIDs(group, member string) error {
	if err := validGroupID(group); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(member); n < 1 || n > maxMemberIDLen {
		return invalidRequest("member_id must have 1 to %d characters", maxMemberIDLen)
	}
	return nil
}

// validateFetch is ShareFetch's static validation: request-level INVALID_REQUEST before the session
// step; nothing changes and the epoch is not consumed.
// deref is *v, 0 for nil.
func deref(v *int32) int32 {
	if v == nil {
		return 0
	}
	return *v
}

func validateFetch(r *FetchRequest) error {
	if err := validIDs(r.GroupID, r.MemberID); err != nil {
		return err
	}
	if r.Epoch < -1 {
		return invalidRequest("share_session_epoch %d is invalid", r.Epoch)
	}
	for _, f := range []struct {
		name string
		v    int32
	}{{"max_wait_ms", r.MaxWaitMs}, {"min_bytes", r.MinBytes}, {"max_bytes", deref(r.MaxBytes)}, {"max_records", deref(r.MaxRecords)}, {"batch_size", r.BatchSize}} {
		if f.v < 0 {
			return invalidRequest("%s %d is negative", f.name, f.v)
		}
	}
	if r.IsRenewAck {
		if r.Epoch == 0 {
			return invalidRequest("is_renew_ack on an epoch-0 ShareFetch")
		}
		if r.MaxWaitMs != 0 || r.MinBytes != 0 || deref(r.MaxBytes) != 0 || deref(r.MaxRecords) != 0 {
			return invalidRequest("is_renew_ack with max_wait_ms, min_bytes, max_bytes or max_records set")
		}
	}
	if err := validateEntries(r.Partitions, r.IsRenewAck); err != nil {
		return err
	}
	if dup := duplicate(len(r.Forgotten), func(i int) TopicPartition { return r.Forgotten[i] }); dup != nil {
		return invalidRequest("%s/%d appears twice in forgotten_topics_data", dup.Topic, dup.Partition)
	}
	switch r.Epoch {
	case 0:
		for _, e := range r.Partitions {
			if len(e.Batches) > 0 {
				return invalidRequest("acknowledgements on an epoch-0 ShareFetch (%s/%d)", e.Topic, e.Partition)
			}
		}
	case -1:
		if len(r.Forgotten) > 0 {
			return invalidRequest("forgotten_topics_data on a closing ShareFetch (epoch -1)")
		}
		for _, e := range r.Partitions {
			if len(e.Batches) == 0 {
				return invalidRequest("a closing ShareFetch (epoch -1) cannot add %s/%d", e.Topic, e.Partition)
			}
		}
	}
	return nil
}

// validateAck is the batch validation and the id/epoch rules for ShareAcknowledge.
func validateAck(r *AckRequest) error {
	if err := validIDs(r.GroupID, r.MemberID); err != nil {
		return err
	}
	if r.Epoch < -1 {
		return invalidRequest("share_session_epoch %d is invalid", r.Epoch)
	}
	return validateEntries(r.Partitions, r.IsRenewAck)
}

// validateEntries checks duplicates and every acknowledgement batch.
func validateEntries(es []PartitionEntry, renew bool) error {
	if dup := duplicate(len(es), func(i int) TopicPartition { return es[i].TopicPartition }); dup != nil {
		return invalidRequest("%s/%d appears twice in topics", dup.Topic, dup.Partition)
	}
	for _, e := range es {
		for i, b := range e.Batches {
			if b.FirstOffset < 0 || b.LastOffset < b.FirstOffset {
				return invalidRequest("%s/%d: acknowledgement batch [%d, %d] is invalid", e.Topic, e.Partition, b.FirstOffset, b.LastOffset)
			}
			if i > 0 && b.FirstOffset <= e.Batches[i-1].LastOffset {
				return invalidRequest("%s/%d: acknowledgement batches must ascend without overlap", e.Topic, e.Partition)
			}
			if n := uint64(b.LastOffset - b.FirstOffset + 1); len(b.Types) != 1 && uint64(len(b.Types)) != n {
				return invalidRequest("%s/%d: batch [%d, %d] needs 1 or %d acknowledge_types, has %d", e.Topic, e.Partition, b.FirstOffset, b.LastOffset, n, len(b.Types))
			}
			for _, t := range b.Types {
				switch {
				case t < AckAccept || t > AckRenew:
					return invalidRequest("%s/%d: acknowledge type %d is invalid", e.Topic, e.Partition, t)
				case t == AckRenew && !renew:
					return invalidRequest("%s/%d: RENEW requires is_renew_ack", e.Topic, e.Partition)
				}
			}
		}
	}
	return nil
}

// duplicate returns a (topic, partition) that occurs twice, if any.
func duplicate(n int, at func(int) TopicPartition) *TopicPartition {
	if n < 2 {
		return nil
	}
	if n <= 16 {
		for i := 1; i < n; i++ {
			for j := 0; j < i; j++ {
				if at(i) == at(j) {
					tp := at(i)
					return &tp
				}
			}
		}
		return nil
	}
	seen := make(map[TopicPartition]struct{}, n)
	for i := range n {
		tp := at(i)
		if _, ok := seen[tp]; ok {
			return &tp
		}
		seen[tp] = struct{}{}
	}
	return nil
}
