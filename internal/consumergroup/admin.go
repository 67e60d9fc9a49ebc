package consumergroup

import (
	"context"
	"strconv"

	"github.com/sharelog/sharelog/apierr"
)

func itoaLen[M ~map[string]*member](m M) string { return strconv.Itoa(len(m)) }

// Describe is DescribeGroups of one group: an unknown group is Dead with
// no members, as Kafka answers. Metadata, assignments and the protocol are
// given for a Stable group only.
func (c *Coordinator) Describe(ctx context.Context, group string) (GroupDescription, error) {
	g, _, err := c.lockGroup(ctx, group, false)
	if err != nil {
		return GroupDescription{}, err
	}
	if g == nil {
		return GroupDescription{Group: group, State: Dead}, nil
	}
	defer g.mu.Unlock()
	if g.cs != nil {
		return GroupDescription{}, errConsumerGroup(g)
	}
	d := GroupDescription{Group: group, State: g.state, ProtocolType: g.protocolType, Generation: g.generation, LeaderID: g.leader}
	stable := g.state == Stable
	if stable {
		d.Protocol = g.protocol
	}
	for _, m := range g.sortedMembers() {
		md := MemberDescription{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost}
		if stable {
			md.Metadata, md.Assignment = m.metadata(g.protocol), m.assignment
		}
		d.Members = append(d.Members, md)
	}
	return d, nil
}

// List is ListGroups: every group, sorted by id.
func (c *Coordinator) List(_ context.Context) ([]GroupListing, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	var out []GroupListing
	for _, g := range c.snapshotGroups() {
		g.mu.Lock()
		if g.state != Dead {
			l := GroupListing{Group: g.id, ProtocolType: g.protocolType, State: g.state, Type: "classic", StateName: g.state.String(),
				Members: len(g.members)}
			if g.cs != nil {
				l.Type, l.StateName, l.Members = "consumer", g.consumerStateName(), len(g.cs.members)
			}
			out = append(out, l)
		}
		g.mu.Unlock()
	}
	return out, nil
}

// HasMembers reports whether a group of this coordinator has members
// (joined, joining, or of the consumer protocol).
func (c *Coordinator) HasMembers(group string) bool {
	c.mu.Lock()
	g := c.groups[group]
	c.mu.Unlock()
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.members) > 0 || len(g.pending) > 0 || g.consumerMode()
}

// Has reports whether a group of this coordinator exists.
func (c *Coordinator) Has(group string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups[group] != nil
}

// Delete is DeleteGroups of one group: an empty group and its committed
// offsets are removed (GROUP_ID_NOT_FOUND if unknown, NON_EMPTY_GROUP if it
// has members).
func (c *Coordinator) Delete(ctx context.Context, group string) error {
	if c.o.Coordinates != nil {
		if err := c.o.Coordinates(ctx, group, false); err != nil {
			return err
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	defer c.mu.Unlock()
	g := c.groups[group]
	if g == nil {
		return apierr.New(apierr.GroupIDNotFound, "group %q does not exist", group)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != Empty || len(g.members) > 0 {
		return &apierr.Error{Reason: apierr.NonEmptyGroup, Message: "group " + group + " has members",
			Metadata: map[string]string{"members": itoaLen(g.members)}}
	}
	if err := c.store.Delete(group, nil); err != nil {
		return c.storageErr(group, err)
	}
	for _, p := range g.pending {
		p.stopTimer()
	}
	g.state = Dead
	g.stopTimers()
	delete(c.groups, group)
	return nil
}
