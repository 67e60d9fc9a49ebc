package shareconsumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// fallbackProbeInterval is how often a consumer in the fallback (a server
// without ShareGroupHeartbeat) tries to join again.
var fallbackProbeInterval = 30 * time.Second

type memberMode int8

const (
	modeUnknown  memberMode = iota // not joined yet
	modeMember                     // joined: fetch the assignment
	modeFallback                   // no membership on the server: fetch every partition of the subscription
)

// membership is the consumer's group membership, guarded by Consumer.mu.
type membership struct {
	mode          memberMode
	epoch         int32            // member epoch; 0 while (re)joining
	assignment    []TopicPartition // sorted
	fatal         error            // membership refused for good
	joinSent      bool             // a join (epoch 0) was sent: the server may know the member even if its answer never came
	ready         chan struct{}    // closed once mode != modeUnknown or fatal != nil
	changed       chan struct{}    // closed (and replaced) whenever the assignment changes
	isReady       bool             //
	fallbackParts []TopicPartition // fallback: every partition of the subscription
}

func newMembership() membership {
	return membership{ready: make(chan struct{}), changed: make(chan struct{})}
}

// markReady closes ready once. Caller holds mu.
func (m *membership) markReady() {
	if !m.isReady {
		m.isReady = true
		close(m.ready)
	}
}

// signal wakes those waiting for an assignment change. Caller holds mu.
func (m *membership) signal() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// awaitMembership waits until the consumer knows what to fetch.
func (c *Consumer) awaitMembership(ctx context.Context) error {
	c.mu.Lock()
	ready := c.member.ready
	c.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.member.fatal
}

// heartbeatLoop joins the group, heartbeats every heartbeat_interval_ms,
// rejoins when the server forgot or fenced the member, and falls back to
// fetching every subscribed partition when the server does not implement
// ShareGroupHeartbeat. It returns when Close starts (Close sends the leave).
func (c *Consumer) heartbeatLoop() {
	defer close(c.bgDone)
	ctx := c.bgCtx
	var epoch int32 // 0 = join
	attempt := 0
	for {
		req := &sharelogv1.ShareGroupHeartbeatRequest{
			GroupId:     c.cfg.GroupID,
			MemberId:    c.cfg.MemberID,
			MemberEpoch: epoch,
		}
		if c.cfg.RackID != "" {
			req.RackId = &c.cfg.RackID
		}
		if epoch == 0 {
			req.SubscribedTopicNames = c.cfg.Topics
			c.mu.Lock()
			c.member.joinSent = true
			c.mu.Unlock()
		}
		callCtx, cancel := c.callContext(ctx, 0)
		resp, err := c.groups.ShareGroupHeartbeat(callCtx, req)
		cancel()
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		switch reason := Reason(err); {
		case err == nil:
			attempt = 0
			if epoch == 0 {
				c.log.Debug("joined the share group", "member_epoch", resp.GetMemberEpoch())
			}
			epoch = resp.GetMemberEpoch()
			c.joined(epoch, resp.Assignment)
			wait = time.Duration(resp.GetHeartbeatIntervalMs()) * time.Millisecond
			if wait <= 0 {
				wait = time.Second
			}
		case status.Code(err) == codes.Unimplemented:
			c.fallback()
			epoch, attempt = 0, 0
			wait = fallbackProbeInterval
		case apierr.Reason(reason) == apierr.UnknownMemberID || apierr.Reason(reason) == apierr.FencedMemberEpoch || apierr.Reason(reason) == apierr.GroupIDNotFound:
			c.log.Info("rejoining the share group", "reason", reason)
			epoch = 0
			c.setEpoch(0)
			if attempt > 0 {
				wait = c.cfg.Backoff.Delay(attempt - 1)
			}
			attempt++
		case fatalMembership(err):
			c.log.Error("the share group refused the member", "err", err)
			c.mu.Lock()
			c.member.fatal = fmt.Errorf("shareconsumer: joining group %q: %w", c.cfg.GroupID, err)
			c.member.markReady()
			c.mu.Unlock()
			return
		default:
			c.log.Warn("heartbeat failed; retrying", "attempt", attempt+1, "err", err)
			wait = c.cfg.Backoff.Delay(attempt)
			attempt++
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// fatalMembership reports heartbeat errors that retrying cannot fix.
func fatalMembership(err error) bool {
	switch apierr.Reason(Reason(err)) {
	case apierr.InvalidRequest, apierr.GroupMaxSizeReached:
		return true
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}

// joined records a heartbeat response; asg is nil when unchanged.
func (c *Consumer) joined(epoch int32, asg *sharelogv1.Assignment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := &c.member
	if m.mode == modeFallback {
		c.log.Info("the server now implements ShareGroupHeartbeat: fetching the assignment")
	}
	wasMember := m.mode == modeMember
	m.mode, m.epoch = modeMember, epoch
	if asg != nil || !wasMember {
		var parts []TopicPartition
		for _, tp := range asg.GetTopicPartitions() {
			for _, p := range tp.GetPartitions() {
				parts = append(parts, TopicPartition{Topic: tp.GetTopic(), Partition: p})
			}
		}
		slices.SortFunc(parts, compareTP)
		parts = slices.Compact(parts)
		if !slices.Equal(parts, m.assignment) || !wasMember {
			c.log.Debug("assignment", "partitions", len(parts))
			m.assignment = parts
			m.signal()
		}
	}
	m.markReady()
}

func (c *Consumer) setEpoch(epoch int32) {
	c.mu.Lock()
	c.member.epoch = epoch
	c.mu.Unlock()
}

// fallback switches to fetching every partition of the subscription.
func (c *Consumer) fallback() {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := &c.member
	if m.mode != modeFallback {
		c.log.Info("the server does not implement ShareGroupHeartbeat (UNIMPLEMENTED): without group membership, fetching every partition of the subscribed topics")
		m.mode, m.epoch = modeFallback, 0
		m.signal()
	}
	m.markReady()
}

// leave sends the leave heartbeat (-1) if the consumer is a member,
// retrying while the failure is retryable. When it may be one — a join
// whose answer Close cut off (rejoining included) may have made the member
// on the server, which would otherwise hold its assignment until its
// session times out — it sends one leave and ignores its outcome (a server
// that never had the member answers UNKNOWN_MEMBER_ID).
func (c *Consumer) leave(ctx context.Context) error {
	c.mu.Lock()
	mode, epoch, joinSent := c.member.mode, c.member.epoch, c.member.joinSent
	c.mu.Unlock()
	switch {
	case mode == modeFallback || epoch < 0 || !joinSent:
		return nil
	case mode != modeMember || epoch == 0:
		callCtx, cancel := c.callContext(ctx, 0)
		defer cancel()
		_, _ = c.groups.ShareGroupHeartbeat(callCtx, &sharelogv1.ShareGroupHeartbeatRequest{
			GroupId: c.cfg.GroupID, MemberId: c.cfg.MemberID, MemberEpoch: -1,
		})
		c.setEpoch(-1)
		return nil
	}
	for attempt := 0; ; attempt++ {
		callCtx, cancel := c.callContext(ctx, 0)
		_, err := c.groups.ShareGroupHeartbeat(callCtx, &sharelogv1.ShareGroupHeartbeatRequest{
			GroupId: c.cfg.GroupID, MemberId: c.cfg.MemberID, MemberEpoch: -1,
		})
		cancel()
		switch apierr.Reason(Reason(err)) {
		case apierr.UnknownMemberID, apierr.GroupIDNotFound:
			err = nil // already gone (expired, or the server restarted)
		}
		if err == nil || status.Code(err) == codes.Unimplemented {
			c.setEpoch(-1)
			return nil
		}
		if f := classify(ctx, err); !f.retry || !sleep(ctx, c.cfg.Backoff.Delay(attempt)) {
			return fmt.Errorf("shareconsumer: leaving group %q: %w", c.cfg.GroupID, errors.Join(err, ctx.Err()))
		}
	}
}
