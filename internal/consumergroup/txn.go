package consumergroup

import (
	"context"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

// The consumer-group side of Kafka transactions (docs/kafka.md
// "Transactions"): TxnOffsetCommit checks the member as OffsetCommit does
// (CheckMember) but commits nothing; the transaction coordinator commits
// the offsets when the transaction commits (CommitTransaction).

// CheckMember is OffsetCommit's member and generation check without the
// commit: the check of a TxnOffsetCommit (v3+ names its member). No member
// id and a negative generation is a commit without group management,
// accepted as Kafka does. An unknown group is ILLEGAL_GENERATION, as
// Kafka's TxnOffsetCommit before v6.
func (c *Coordinator) CheckMember(ctx context.Context, group, memberID string, instanceID *string, generation int32) error {
	if group == "" {
		return apierr.New(apierr.InvalidGroupID, "the group id is empty")
	}
	if generation < 0 && memberID == "" && instanceID == nil {
		return nil
	}
	g, _, err := c.lockGroup(ctx, group, false)
	if err != nil {
		return err
	}
	if g == nil {
		return apierr.New(apierr.IllegalGeneration, "group %q does not exist", group)
	}
	defer g.mu.Unlock()
	if g.consumerMode() {
		return g.checkConsumerCommit(memberID, generation)
	}
	if err := g.validateInstance(instanceID, memberID); err != nil {
		return err
	}
	if g.members[memberID] == nil {
		return apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", memberID, g.id)
	}
	if generation != g.generation {
		return apierr.New(apierr.IllegalGeneration, "generation %d is not group %q's %d", generation, g.id, g.generation)
	}
	return nil
}

// CommitTransaction writes the offsets a committed transaction carried
// for group (checked by CheckMember when they were sent), durable before
// it returns; the group is made if it does not exist, as a simple
// commit's. A failure is the store's: the coordinator retries.
func (c *Coordinator) CommitTransaction(ctx context.Context, group string, offsets []groupoffsets.Offset) error {
	if len(offsets) == 0 {
		return nil
	}
	g, created, err := c.lockGroup(ctx, group, true)
	if err != nil {
		return err
	}
	now := c.o.Now()
	write := make([]groupoffsets.Offset, len(offsets))
	for i, o := range offsets {
		o.CommitTime = now
		write[i] = o
	}
	if err := c.store.Commit(g.id, write); err != nil {
		serr := c.storageErr(g.id, err)
		g.mu.Unlock()
		if created {
			c.reap(g)
		}
		return serr
	}
	for _, o := range write {
		g.offsets[partKey{o.Topic, o.Partition}] = o
	}
	c.persistEmptySince(g)
	g.mu.Unlock()
	return nil
}
