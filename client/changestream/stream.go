package changestream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// MaxRecvMsgSize is the library's receive limit per event; it must exceed
// the largest record.
const MaxRecvMsgSize = 64 << 20

// DialOptions are the connection options the library expects:
// keepalive pings every 30 s with a 10 s timeout, also without active calls
// (a dead connection in an idle tail is found within 40 s), and the 64 MiB
// receive limit. Pass them to grpc.NewClient.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRecvMsgSize)),
	}
}

// Stream follows one partition's change stream and applies the resume rules
// of docs/change-streams.md: it commits the checkpoint only at consistent
// points, reconnects with backoff from it, and resets the application on a
// rollback.
type Stream struct {
	changes sharelogv1.ChangeStreamServiceClient
	topics  sharelogv1.LogServiceClient
	cfg     Config
	h       Handler
	backoff Backoff

	running atomic.Bool
	mu      sync.Mutex
	cp      Checkpoint // the committed checkpoint C
	// aborted: an OSO snapshot started from nothing (Y = -1) failed after
	// delivering items; the state must be reset before resuming.
	aborted bool

	// sleep waits between retries (tests replace it).
	sleep func(ctx context.Context, d time.Duration) error
}

// New returns a Stream over cc. It rejects a Config.From of another
// partition.
func New(cc grpc.ClientConnInterface, cfg Config, h Handler) (*Stream, error) {
	switch {
	case cfg.Topic == "":
		return nil, errors.New("changestream: Config.Topic is required")
	case cfg.Partition < 0:
		return nil, fmt.Errorf("changestream: negative partition %d", cfg.Partition)
	case h == nil:
		return nil, errors.New("changestream: a Handler is required")
	case cfg.OSO < OSOWithOffsetAdvanced || cfg.OSO > OSOOff:
		return nil, fmt.Errorf("changestream: unknown OSO mode %d", cfg.OSO)
	case cfg.EndOffset != nil && *cfg.EndOffset < 0:
		return nil, fmt.Errorf("changestream: negative end offset %d", *cfg.EndOffset)
	}
	cp := Checkpoint{Partition: cfg.Partition}
	if cfg.From != nil {
		if cfg.From.Partition != cfg.Partition {
			return nil, fmt.Errorf("changestream: checkpoint of partition %d for a stream of partition %d", cfg.From.Partition, cfg.Partition)
		}
		if cfg.From.NextOffset < 0 {
			return nil, fmt.Errorf("changestream: checkpoint with negative next offset %d", cfg.From.NextOffset)
		}
		cp = *cfg.From
	}
	return &Stream{
		changes: sharelogv1.NewChangeStreamServiceClient(cc),
		topics:  sharelogv1.NewLogServiceClient(cc),
		cfg:     cfg,
		h:       h,
		backoff: reconnectBackoff(cfg.Backoff),
		cp:      cp,
		sleep:   sleepCtx,
	}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Checkpoint returns the committed checkpoint. It is safe from any goroutine
// and never reflects a position inside an OSO snapshot.
func (s *Stream) Checkpoint() Checkpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cp
}

func (s *Stream) setCheckpoint(c Checkpoint) {
	s.mu.Lock()
	s.cp = c
	s.mu.Unlock()
}

func (s *Stream) commit(next int64) Checkpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cp.NextOffset = next
	return s.cp
}

// outcome is how one call ended.
type outcome int

const (
	outDone     outcome = iota // stream_end{OK}
	outFail                    // return err
	outRetry                   // reconnect after a backoff
	outRollback                // reset, then reconnect at once
)

// Run streams until stream_end{OK} (nil), stream_end{TOPIC_DELETED}
// (ErrTopicDeleted), a non-retryable error, a handler error, a protocol
// violation (*ProtocolError) or ctx's end (ctx.Err()). Handlers run on
// Run's goroutine, one at a time. One Run at a time.
func (s *Stream) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("changestream: Run is already running")
	}
	defer s.running.Store(false)
	retries := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.aborted {
			if err := s.reset(ctx, OSOAborted); err != nil {
				return err
			}
		}
		if s.Checkpoint().TopicID == "" {
			id, err := s.describe(ctx)
			if err != nil {
				return err
			}
			s.mu.Lock()
			s.cp.TopicID = id
			s.mu.Unlock()
		}
		out, cause, delivered, err := s.call(ctx)
		if delivered {
			retries = 0
		}
		switch out {
		case outDone:
			return nil
		case outFail:
			return err
		case outRollback:
			if err := s.reset(ctx, cause); err != nil {
				return err
			}
		case outRetry:
			if s.aborted {
				continue // the reset reconnects at once
			}
			if err := s.sleep(ctx, s.backoff.Delay(retries)); err != nil {
				return err
			}
			retries++
		}
	}
}

// describe learns the topic's current id, retrying transient failures.
func (s *Stream) describe(ctx context.Context) (string, error) {
	for retries := 0; ; retries++ {
		t, err := s.topics.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: s.cfg.Topic})
		if err == nil {
			if s.cfg.Partition >= t.GetPartitionCount() {
				return "", status.Errorf(codes.NotFound, "topic %q has no partition %d", s.cfg.Topic, s.cfg.Partition)
			}
			return t.GetTopicId(), nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if !retryable(err) {
			return "", err
		}
		if err := s.sleep(ctx, s.backoff.Delay(retries)); err != nil {
			return "", err
		}
	}
}

// reset drops the application's state and restarts from offset 0 of the
// topic's current incarnation.
func (s *Stream) reset(ctx context.Context, cause ResetCause) error {
	old := s.Checkpoint()
	if err := s.h.OnReset(ctx, Reset{Cause: cause, OldTopicID: old.TopicID}); err != nil {
		return err
	}
	// The state is gone: from here the checkpoint is "nothing held".
	s.aborted = false
	s.setCheckpoint(Checkpoint{Partition: s.cfg.Partition})
	id, err := s.describe(ctx)
	if err != nil {
		return err
	}
	s.setCheckpoint(Checkpoint{TopicID: id, Partition: s.cfg.Partition})
	return s.h.OnCheckpoint(ctx, s.Checkpoint())
}

// retryable reports whether a failed call is retried with backoff.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.Internal, codes.Unknown,
		codes.DeadlineExceeded, codes.Aborted, codes.Canceled:
		return true
	}
	return false
}

// rollbackCause returns the reset cause of a ROLLBACK_REQUIRED status.
func rollbackCause(err error) (ResetCause, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return 0, false
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || apierr.Reason(info.GetReason()) != apierr.RollbackRequired {
			continue
		}
		switch info.GetMetadata()["cause"] {
		case "topic_recreated":
			return TopicRecreated, true
		case "tombstones_purged":
			return TombstonesPurged, true
		default:
			return HistoryPurged, true
		}
	}
	return 0, false
}

func (s *Stream) request(cp Checkpoint) *sharelogv1.StreamChangesRequest {
	req := &sharelogv1.StreamChangesRequest{
		Topic:       s.cfg.Topic,
		Partition:   s.cfg.Partition,
		StartOffset: cp.NextOffset,
		EndOffset:   s.cfg.EndOffset,
		OsoMode:     sharelogv1.OsoMode_OSO_MODE_ON_WITH_OFFSET_ADVANCED,
	}
	switch s.cfg.OSO {
	case OSOOn:
		req.OsoMode = sharelogv1.OsoMode_OSO_MODE_ON
	case OSOOff:
		req.OsoMode = sharelogv1.OsoMode_OSO_MODE_OFF
	}
	if cp.TopicID != "" {
		req.TopicId = &cp.TopicID
	}
	if len(s.cfg.KeyPrefix) > 0 {
		req.KeyPrefix = s.cfg.KeyPrefix
	}
	return req
}

// call runs one StreamChanges call and says how it ended.
func (s *Stream) call(ctx context.Context) (out outcome, cause ResetCause, delivered bool, err error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel() // also what cancels the call after a violation or a handler error
	cp := s.Checkpoint()
	c := &callState{s: s, ctx: ctx, cfg: &s.cfg, start: cp.NextOffset, snapS: -1, snapE: -1, prevE: -1}
	if s.cfg.EndOffset != nil {
		c.hasEnd, c.end = true, *s.cfg.EndOffset
	}
	defer func() {
		if out != outDone && c.osoOpen && c.y == -1 && c.items > 0 {
			s.aborted = true
		}
	}()
	st, err := s.changes.StreamChanges(cctx, s.request(cp), grpc.MaxCallRecvMsgSize(MaxRecvMsgSize))
	if err == nil {
	recv:
		for {
			var resp *sharelogv1.StreamChangesResponse
			if resp, err = st.Recv(); err != nil {
				break
			}
			// A message is consecutive events: each is handled as if it
			// had come alone, so a checkpoint may fall between two events
			// of one message.
			events := resp.GetEvents()
			for i, ev := range events {
				delivered = true
				var ended bool
				if out, cause, ended, err = c.event(ev, i == len(events)-1, st); ended {
					return out, cause, delivered, err
				}
				if err = ctx.Err(); err != nil {
					break recv
				}
			}
		}
	}
	if ctx.Err() != nil {
		return outFail, 0, delivered, ctx.Err()
	}
	if errors.Is(err, io.EOF) {
		return outRetry, 0, delivered, nil // ended without stream_end
	}
	if cause, ok := rollbackCause(err); ok {
		return outRollback, cause, delivered, nil
	}
	if retryable(err) {
		return outRetry, 0, delivered, nil
	}
	return outFail, 0, delivered, err
}

// callState is one call's protocol state.
type callState struct {
	s      *Stream
	ctx    context.Context
	cfg    *Config
	start  int64
	hasEnd bool
	end    int64

	any      bool // an event arrived
	osoOpen  bool
	osoEnded bool
	y, x     int64
	items    int
	osoAdv   bool

	snapOpen     bool  // an ordered snapshot is open (marker seen, not closed)
	snapS, snapE int64 // the open (or last) snapshot's range
	last         int64 // last item offset in the open snapshot
	prevE        int64 // e of the previous ordered snapshot, -1 if none
	justClosed   bool  // the previous event closed an ordered snapshot
	justEndedOSO bool  // the previous event was OSO END
}

func (c *callState) violation(ev, rule string) (outcome, ResetCause, bool, error) {
	return outFail, 0, true, &ProtocolError{Event: ev, Rule: rule}
}

func (c *callState) matches(key []byte) bool {
	return len(key) > 0 && bytes.HasPrefix(key, c.cfg.KeyPrefix)
}

// event handles one event; last says it is the last of its message, and
// ended that the call is over (with out).
func (c *callState) event(resp *sharelogv1.ChangeEvent, last bool, st sharelogv1.ChangeStreamService_StreamChangesClient) (outcome, ResetCause, bool, error) {
	ctx, h := c.ctx, c.s.h
	justClosed, justEndedOSO, first := c.justClosed, c.justEndedOSO, !c.any
	c.justClosed, c.justEndedOSO, c.any = false, false, true
	fail := func(err error) (outcome, ResetCause, bool, error) { return outFail, 0, true, err }
	switch e := resp.GetEvent().(type) {
	case *sharelogv1.ChangeEvent_OsoSnapshot:
		switch e.OsoSnapshot.GetPhase() {
		case sharelogv1.OsoPhase_OSO_PHASE_START:
			switch {
			case c.cfg.OSO == OSOOff:
				return c.violation("oso(START)", "OSO snapshot in mode OFF")
			case c.osoOpen:
				return c.violation("oso(START)", "an OSO snapshot is already open")
			case !first:
				return c.violation("oso(START)", "OSO START after another event of the call")
			}
			c.osoOpen, c.y = true, c.start-1
			c.x = c.y
			if err := h.OnSnapshot(ctx, Snapshot{Kind: OSOStart}); err != nil {
				return fail(err)
			}
		case sharelogv1.OsoPhase_OSO_PHASE_END:
			if !c.osoOpen {
				return c.violation("oso(END)", "no OSO snapshot is open")
			}
			if err := h.OnSnapshot(ctx, Snapshot{Kind: OSOEnd}); err != nil {
				return fail(err)
			}
			c.osoOpen, c.osoEnded, c.justEndedOSO = false, true, true
			if err := h.OnCheckpoint(ctx, c.s.commit(max(c.x, c.y)+1)); err != nil {
				return fail(err)
			}
		default:
			return c.violation("oso(?)", "unknown OSO phase")
		}
	case *sharelogv1.ChangeEvent_SnapshotMarker:
		m := e.SnapshotMarker
		s, end := m.GetStartOffset(), m.GetEndOffset()
		ev := fmt.Sprintf("marker(%d..%d)", s, end)
		switch {
		case c.osoOpen:
			return c.violation(ev, "a marker inside an OSO snapshot")
		case c.snapOpen:
			return c.violation(ev, "a marker before the previous snapshot closed")
		case end < s:
			return c.violation(ev, "a marker with end < start")
		case c.prevE >= 0 && s != c.prevE+1:
			return c.violation(ev, fmt.Sprintf("start is not the previous end + 1 (%d)", c.prevE+1))
		case c.prevE < 0 && c.osoEnded && s <= c.x:
			return c.violation(ev, fmt.Sprintf("the first marker after OSO END starts at or below X = %d", c.x))
		case c.prevE < 0 && c.osoEnded && c.cfg.OSO == OSOWithOffsetAdvanced && s != c.x+1:
			return c.violation(ev, fmt.Sprintf("the first marker after OSO END does not start at X + 1 = %d", c.x+1))
		case c.prevE < 0 && !c.osoEnded && c.start > 0 && s != c.start:
			return c.violation(ev, fmt.Sprintf("the first marker does not start at start_offset %d", c.start))
		}
		c.snapOpen, c.snapS, c.snapE, c.last, c.prevE = true, s, end, s-1, end
		if err := h.OnSnapshot(ctx, Snapshot{Kind: Ordered, Start: s, End: end, Source: Source(m.GetSource())}); err != nil {
			return fail(err)
		}
	case *sharelogv1.ChangeEvent_Mutation, *sharelogv1.ChangeEvent_Deletion:
		var off int64
		var key []byte
		var ev string
		if mu := resp.GetMutation(); mu != nil {
			off, key, ev = mu.GetOffset(), mu.GetKey(), fmt.Sprintf("mut(%q@%d)", mu.GetKey(), mu.GetOffset())
		} else {
			d := resp.GetDeletion()
			off, key, ev = d.GetOffset(), d.GetKey(), fmt.Sprintf("del(%q@%d)", d.GetKey(), d.GetOffset())
		}
		if !c.matches(key) {
			return c.violation(ev, "the key does not match the prefix")
		}
		if c.osoOpen {
			switch {
			case off <= c.y:
				return c.violation(ev, fmt.Sprintf("an OSO item at or below Y = %d", c.y))
			case c.osoAdv:
				return c.violation(ev, "an OSO item after offset_advanced")
			}
			if err := c.deliver(resp, true); err != nil {
				return fail(err)
			}
			c.x, c.items = max(c.x, off), c.items+1
			return outRetry, 0, false, nil
		}
		switch {
		case !c.snapOpen && c.prevE < 0 && !c.osoEnded:
			return c.violation(ev, "an item before the first marker or OSO START")
		case !c.snapOpen:
			return c.violation(ev, "an item outside any open snapshot")
		case off < c.snapS || off > c.snapE:
			return c.violation(ev, fmt.Sprintf("an item outside the snapshot [%d, %d]", c.snapS, c.snapE))
		case off <= c.last:
			return c.violation(ev, fmt.Sprintf("an item not above the previous offset %d", c.last))
		}
		if err := c.deliver(resp, false); err != nil {
			return fail(err)
		}
		c.last = off
		cp := c.s.commit(off + 1)
		if off == c.snapE {
			c.snapOpen, c.justClosed = false, true
			if err := h.OnCheckpoint(ctx, cp); err != nil {
				return fail(err)
			}
		}
	case *sharelogv1.ChangeEvent_OffsetAdvanced:
		o := e.OffsetAdvanced.GetOffset()
		ev := fmt.Sprintf("adv(%d)", o)
		if c.osoOpen {
			switch {
			case c.cfg.OSO == OSOOn:
				return c.violation(ev, "offset_advanced inside an OSO snapshot in mode ON")
			case c.osoAdv:
				return c.violation(ev, "a second offset_advanced inside an OSO snapshot")
			case o <= c.x:
				return c.violation(ev, fmt.Sprintf("offset_advanced at or below X = %d", c.x))
			}
			c.x, c.osoAdv = o, true
			return outRetry, 0, false, nil
		}
		switch {
		case !c.snapOpen && c.prevE < 0 && !c.osoEnded:
			return c.violation(ev, "offset_advanced before the first marker or OSO START")
		case !c.snapOpen:
			return c.violation(ev, "offset_advanced after the snapshot closed")
		case o != c.snapE:
			return c.violation(ev, fmt.Sprintf("offset_advanced is not the snapshot's end %d", c.snapE))
		}
		c.snapOpen, c.justClosed = false, true
		if err := h.OnCheckpoint(ctx, c.s.commit(o+1)); err != nil {
			return fail(err)
		}
	case *sharelogv1.ChangeEvent_StreamEnd:
		reason := e.StreamEnd.GetReason()
		ev := "end(" + reason.String() + ")"
		// Nothing may follow stream_end: neither in its message nor after
		// it; the call must complete now.
		if !last {
			return c.violation(ev, "an event after stream_end")
		}
		if next, err := st.Recv(); err == nil {
			_ = next
			return c.violation(ev, "an event after stream_end")
		}
		switch reason {
		case sharelogv1.StreamEndReason_STREAM_END_REASON_OK:
			switch {
			case !c.hasEnd:
				return c.violation(ev, "stream_end{OK} without end_offset")
			case first && (c.start == c.end || c.start == 0):
				// The only event: nothing to cover (with start 0 the whole
				// range may lie below the log start offset).
			case justEndedOSO:
			case justClosed && c.snapE == c.end-1:
			default:
				return c.violation(ev, "stream_end{OK} before the range up to end_offset was covered")
			}
			return outDone, 0, true, h.OnCheckpoint(ctx, c.s.commit(c.end))
		case sharelogv1.StreamEndReason_STREAM_END_REASON_ROLLBACK:
			return outRollback, Overtaken, true, nil
		case sharelogv1.StreamEndReason_STREAM_END_REASON_TOPIC_DELETED:
			return outFail, 0, true, ErrTopicDeleted
		case sharelogv1.StreamEndReason_STREAM_END_REASON_SHUTDOWN:
			return outRetry, 0, true, nil
		default:
			return c.violation(ev, "unknown stream_end reason")
		}
	default:
		return c.violation(fmt.Sprintf("%v", resp), "unknown event type")
	}
	return outRetry, 0, false, nil
}

// deliver hands an item to the handler.
func (c *callState) deliver(resp *sharelogv1.ChangeEvent, inOSO bool) error {
	if mu := resp.GetMutation(); mu != nil {
		m := Mutation{Offset: mu.GetOffset(), Timestamp: mu.GetTimestamp(), Key: mu.GetKey(), Value: mu.GetValue(), InOSO: inOSO}
		if m.Value == nil {
			m.Value = []byte{} // a mutation always has a value, possibly empty
		}
		for _, hd := range mu.GetHeaders() {
			m.Headers = append(m.Headers, Header{Key: hd.GetKey(), Value: hd.GetValue()})
		}
		return c.s.h.OnMutation(c.ctx, m)
	}
	d := resp.GetDeletion()
	return c.s.h.OnDeletion(c.ctx, Deletion{Offset: d.GetOffset(), Timestamp: d.GetTimestamp(), Key: d.GetKey(), InOSO: inOSO})
}

// reconnectBackoff applies the change-stream default of Max.
func reconnectBackoff(b Backoff) Backoff {
	if b.Max <= 0 {
		b.Max = defaultMaxBackoff
	}
	return b.WithDefaults()
}
