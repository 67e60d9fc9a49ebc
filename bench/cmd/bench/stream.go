package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharelog/sharelog/bench/internal/verify"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// streamResult is what one StreamChanges call delivered.
type streamResult struct {
	items   int64 // mutations + deletions
	oso     bool  // began with an OSO snapshot
	elapsed time.Duration
	hash    verify.MapHash
}

// streamChanges runs one StreamChanges call to its stream_end{OK} and checks
// the event grammar: an optional OSO snapshot first,
// then ordered snapshots whose items ascend inside their marker ranges. Every
// item's key must start with prefix. onItem (optional) sees each item.
func streamChanges(ctx context.Context, c *client, req *sharelogv1.StreamChangesRequest, onItem func(off int64, key []byte)) (*streamResult, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	st, err := c.cs.StreamChanges(cctx, req)
	if err != nil {
		return nil, classify("ChangeStreamService.StreamChanges", err)
	}
	res := &streamResult{}
	prefix := req.GetKeyPrefix()
	inOSO, sawEvent := false, false
	var markS, markE, lastOff int64 = -1, -1, -1
	markerOpen := false
	item := func(off int64, key []byte) error {
		if !bytes.HasPrefix(key, prefix) || len(key) == 0 {
			return fmt.Errorf("item at %d has key %q outside prefix %q", off, key, prefix)
		}
		if !inOSO {
			if !markerOpen || off < markS || off > markE || off <= lastOff {
				return fmt.Errorf("ordered item at %d outside marker %d..%d or not ascending (last %d)", off, markS, markE, lastOff)
			}
			lastOff = off
			if off == markE {
				markerOpen = false
			}
		}
		res.items++
		res.hash.Add(key, off)
		if onItem != nil {
			onItem(off, key)
		}
		return nil
	}
	var pending []*sharelogv1.ChangeEvent // the rest of the last message
	for {
		if len(pending) == 0 {
			resp, err := st.Recv()
			if err == io.EOF {
				return nil, errors.New("StreamChanges ended without stream_end")
			}
			if err != nil {
				return nil, classify("ChangeStreamService.StreamChanges", err)
			}
			if pending = resp.GetEvents(); len(pending) == 0 {
				return nil, errors.New("a StreamChanges message without events")
			}
		}
		ev := pending[0]
		pending = pending[1:]
		first := !sawEvent
		sawEvent = true
		switch e := ev.GetEvent().(type) {
		case *sharelogv1.ChangeEvent_OsoSnapshot:
			switch e.OsoSnapshot.GetPhase() {
			case sharelogv1.OsoPhase_OSO_PHASE_START:
				if !first {
					return nil, errors.New("OSO START not the first event")
				}
				inOSO, res.oso = true, true
			case sharelogv1.OsoPhase_OSO_PHASE_END:
				if !inOSO {
					return nil, errors.New("OSO END without START")
				}
				inOSO = false
			}
		case *sharelogv1.ChangeEvent_SnapshotMarker:
			if inOSO || markerOpen {
				return nil, fmt.Errorf("marker %d..%d inside an open snapshot", e.SnapshotMarker.GetStartOffset(), e.SnapshotMarker.GetEndOffset())
			}
			markS, markE, markerOpen = e.SnapshotMarker.GetStartOffset(), e.SnapshotMarker.GetEndOffset(), true
			if markE < markS {
				return nil, fmt.Errorf("marker %d..%d", markS, markE)
			}
		case *sharelogv1.ChangeEvent_Mutation:
			if err := item(e.Mutation.GetOffset(), e.Mutation.GetKey()); err != nil {
				return nil, err
			}
		case *sharelogv1.ChangeEvent_Deletion:
			if err := item(e.Deletion.GetOffset(), e.Deletion.GetKey()); err != nil {
				return nil, err
			}
		case *sharelogv1.ChangeEvent_OffsetAdvanced:
			if !inOSO {
				if !markerOpen || e.OffsetAdvanced.GetOffset() != markE {
					return nil, fmt.Errorf("offset_advanced %d does not close marker %d..%d", e.OffsetAdvanced.GetOffset(), markS, markE)
				}
				markerOpen = false
			}
		case *sharelogv1.ChangeEvent_StreamEnd:
			if r := e.StreamEnd.GetReason(); r != sharelogv1.StreamEndReason_STREAM_END_REASON_OK {
				return nil, fmt.Errorf("stream_end %v", r)
			}
			if inOSO || markerOpen {
				return nil, errors.New("stream_end inside an open snapshot")
			}
			if len(pending) > 0 {
				return nil, errors.New("events after stream_end in its message")
			}
			res.elapsed = time.Since(t0)
			return res, nil
		default:
			return nil, fmt.Errorf("unknown event %T", e)
		}
	}
}

// orderedReplayPeer replays a stream of n messages with a JetStream ordered
// consumer and checks that sequences 1..n arrive in order.
func orderedReplayPeer(ctx context.Context, url, stream string, n int64, maxDur time.Duration) (time.Duration, error) {
	nc, js, err := natsConnect(url, "s1")
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	t0 := time.Now()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	var next uint64 = 1
	var count atomic.Int64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			select {
			case done <- err:
			default:
			}
			return
		}
		if md.Sequence.Stream != next {
			select {
			case done <- fmt.Errorf("ordered consumer: sequence %d, want %d", md.Sequence.Stream, next):
			default:
			}
			return
		}
		next++
		if count.Add(1) == n {
			done <- nil
		}
	})
	if err != nil {
		return 0, err
	}
	defer cc.Stop()
	select {
	case err := <-done:
		if err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	case <-time.After(maxDur):
		return 0, fmt.Errorf("ordered consumer: %d of %d messages within %v", count.Load(), n, maxDur)
	}
}
