package jslog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// partition is one partition's stream as this instance knows it: its
// bounds, its key index, and the ordered consumer that feeds both with
// what other writers append.
type partition struct {
	s       *Store
	topic   string
	id      int32
	stream  string
	subject string
	keys    *logstore.MemKeyIndex
	watch   logstore.Notifier

	openMu   sync.Mutex // serialises load
	appendMu sync.Mutex // one append at a time: each expects the previous one's end

	mu         sync.Mutex
	loaded     bool
	gone       error // non-nil after deletion or Close
	logStart   int64 // first offset this instance may serve
	hw         int64 // next offset: the stream's last sequence as this instance knows it
	indexed    int64 // every offset below it is in keys (or below the log start when loaded)
	frameBytes int64 // stored bytes of the frames indexed so far (for RangeStats)
	frames     int64
	resync     bool // an append's outcome is unknown: re-read the stream's end first
	cons       njs.ConsumeContext
	// writeErr is the last append's storage error (nil once one succeeds),
	// at writeErrAt: what Unwritable reports.
	writeErr   error
	writeErrAt time.Time
}

// load reads the stream's bounds and starts the ordered consumer, once.
// The key index is rebuilt by that consumer from the log start on, so
// ScanKeys answers ErrIndexNotReady until it has caught up.
func (p *partition) load(ctx context.Context) error {
	p.mu.Lock()
	loaded, gone := p.loaded, p.gone
	p.mu.Unlock()
	if gone != nil {
		return gone
	}
	if loaded {
		return nil
	}
	p.openMu.Lock()
	defer p.openMu.Unlock()
	p.mu.Lock()
	loaded, gone = p.loaded, p.gone
	p.mu.Unlock()
	if gone != nil {
		return gone
	}
	if loaded {
		return nil
	}
	st, err := p.s.js.Stream(ctx, p.stream)
	if err != nil {
		return p.streamErr(ctx, "load", err)
	}
	state := st.CachedInfo().State
	ls := int64(max(state.FirstSeq, 1)) - 1
	hw := int64(state.LastSeq)
	cons, err := p.s.js.OrderedConsumer(ctx, p.stream, njs.OrderedConsumerConfig{
		DeliverPolicy: njs.DeliverByStartSequencePolicy,
		OptStartSeq:   uint64(ls) + 1,
	})
	if err != nil {
		return p.streamErr(ctx, "follow", err)
	}
	cc, err := cons.Consume(p.onMsg, njs.ConsumeErrHandler(func(njs.ConsumeContext, error) {}))
	if err != nil {
		return p.streamErr(ctx, "follow", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone != nil {
		cc.Stop()
		return p.gone
	}
	p.loaded, p.cons = true, cc
	p.logStart = max(p.logStart, ls)
	p.hw = max(p.hw, hw)
	p.indexed = max(p.indexed, ls)
	return nil
}

// streamErr classifies an error of a call about the partition's stream.
func (p *partition) streamErr(ctx context.Context, op string, err error) error {
	if errors.Is(err, njs.ErrStreamNotFound) || sljs.APICode(err) == sljs.CodeStreamNotFound {
		return fmt.Errorf("topic %q partition %d: stream %s does not exist: %w", p.topic, p.id, p.stream, logstore.ErrUnknownTopic)
	}
	return sljs.Wrap(ctx, fmt.Sprintf("topic %q partition %d: %s stream %s", p.topic, p.id, op, p.stream), err, logstore.ErrStorage)
}

// onMsg is the ordered consumer's handler: it indexes records this
// instance has not indexed yet and moves the high watermark past records
// other writers appended.
func (p *partition) onMsg(msg njs.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		return
	}
	off := int64(meta.Sequence.Stream) - 1
	data := msg.Data()
	p.mu.Lock()
	if p.gone != nil {
		p.mu.Unlock()
		return
	}
	if off >= p.indexed {
		// Offsets between p.indexed and off were purged before the
		// consumer reached them: nothing to index there.
		if rec, err := logstore.DecodeRecord(data); err == nil && rec.Key != nil {
			p.keys.Add(rec.Key, off, rec.Value == nil)
		}
		p.indexed = off + 1
		p.frameBytes += int64(len(data))
		p.frames++
	}
	moved := off+1 > p.hw
	if moved {
		p.hw = off + 1
	}
	p.mu.Unlock()
	if moved {
		p.watch.Notify()
	}
}

func (p *partition) shutdown(err error) {
	p.mu.Lock()
	if p.gone == nil {
		p.gone = err
	}
	cc := p.cons
	p.cons = nil
	p.mu.Unlock()
	if cc != nil {
		cc.Stop()
	}
	p.watch.Shutdown(err)
}

// knownBounds is bounds without loading: loaded is false while this
// instance does not follow the partition.
func (p *partition) knownBounds() (ls, hw int64, loaded bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone != nil {
		return 0, 0, false, p.gone
	}
	return p.logStart, p.hw, p.loaded, nil
}

func (p *partition) bounds() (int64, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone != nil {
		return 0, 0, p.gone
	}
	return p.logStart, p.hw, nil
}

// Append implements logstore.Store: the batch is one atomic JetStream batch
// whose first message expects the stream to end where this instance
// believes it ends. A mismatch is ErrFenced (another writer appended);
// nothing of the batch is stored then.
func (s *Store) Append(ctx context.Context, topic string, partition int32, recs []logstore.Record) (int64, error) {
	size, err := logstore.ValidateBatch(recs)
	if err != nil {
		return 0, err
	}
	if len(recs) > s.maxBatch {
		return 0, fmt.Errorf("%w: append of %d records; one atomic JetStream batch holds at most %d", logstore.ErrInvalidArgument, len(recs), s.maxBatch)
	}
	maxPayload := s.nc.MaxPayload()
	for i := range recs {
		if n := logstore.RecordFrameSize(&recs[i]); int64(n) > maxPayload {
			return 0, fmt.Errorf("%w: record %d encodes to %d bytes; the NATS servers accept at most %d (max_payload)",
				logstore.ErrInvalidArgument, i, n, maxPayload)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if t, err := s.topics.Lookup(topic); err == nil {
		if err := logstore.ValidateKeys(t.info.Config, recs); err != nil {
			return 0, err
		}
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	// The write's own bound (--nats-write-timeout), within the call's: a
	// stream electing a leader fails the append fast and retryably, also
	// when the append is the partition's first here and must load it.
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, err
	}
	lctx, lcancel := context.WithTimeout(octx, s.writeTO)
	err = p.load(lctx)
	timedOut := lctx.Err() != nil && octx.Err() == nil
	lcancel()
	if err != nil {
		if timedOut && errors.Is(err, context.DeadlineExceeded) {
			err = s.writeTimedOut(topic, partition, err)
		}
		p.noteWrite(ctx, err)
		return 0, err
	}
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	wctx, wcancel := context.WithTimeout(octx, s.writeTO)
	defer wcancel()
	base, err := p.appendLocked(ctx, wctx, recs, size)
	if err != nil && wctx.Err() != nil && octx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = s.writeTimedOut(topic, partition, err)
	}
	p.noteWrite(ctx, err)
	return base, err
}

// noteWrite records an append's outcome for Unwritable: a storage error
// (not the caller's own deadline) lists the partition, a success clears it.
func (p *partition) noteWrite(ctx context.Context, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err == nil:
		p.writeErr = nil
	case errors.Is(err, logstore.ErrStorage) && ctx.Err() == nil:
		p.writeErr, p.writeErrAt = err, time.Now()
	}
}

// writeTimedOut is the error of an append that --nats-write-timeout
// (our bound, not the caller's deadline) cut: a retryable storage error,
// which must not read as the caller's deadline (err is kept as text only).
func (s *Store) writeTimedOut(topic string, partition int32, err error) error {
	return fmt.Errorf("topic %q partition %d: JetStream did not acknowledge within --nats-write-timeout %v (%v): %w",
		topic, partition, s.writeTO, err, logstore.ErrStorage)
}

// appendLocked is Append's write under appendMu: ctx is the call's, octx
// bounds the JetStream calls.
func (p *partition) appendLocked(ctx, octx context.Context, recs []logstore.Record, size int) (int64, error) {
	s, topic, partition := p.s, p.topic, p.id
	if err := p.resyncTail(octx); err != nil {
		return 0, err
	}
	p.mu.Lock()
	base, gone := p.hw, p.gone
	p.mu.Unlock()
	if gone != nil {
		return 0, gone
	}
	buf := make([]byte, 0, size)
	msgs := make([]*nats.Msg, len(recs))
	for i := range recs {
		start := len(buf)
		buf = logstore.EncodeRecord(buf, &recs[i], base+int64(i), i == len(recs)-1)
		m := nats.NewMsg(p.subject)
		m.Data = buf[start:len(buf):len(buf)]
		if i == 0 {
			m.Header.Set(njs.ExpectedLastSeqHeader, strconv.FormatInt(base, 10))
		}
		msgs[i] = m
	}
	ack, err := jetstreamext.PublishMsgBatch(octx, s.js, msgs)
	// "No responders": no stream leader is listening yet (an election is
	// under way, e.g. after a leader step-down), so nothing was staged and
	// the same batch can be sent again until the call's deadline.
	for backoff := 10 * time.Millisecond; errors.Is(err, nats.ErrNoResponders); backoff = min(2*backoff, 200*time.Millisecond) {
		select {
		case <-octx.Done():
		case <-time.After(backoff):
			ack, err = jetstreamext.PublishMsgBatch(octx, s.js, msgs)
			continue
		}
		break
	}
	if err != nil {
		if sljs.IsWrongLastSequence(err) {
			p.markResync()
			return 0, fmt.Errorf("topic %q partition %d: append expected the log to end at offset %d: %w (%v)",
				topic, partition, base, sljs.ErrFenced, err)
		}
		// The batch may or may not have been committed.
		p.markResync()
		return 0, p.streamErr(ctx, "append to", err)
	}
	want := uint64(base) + uint64(len(recs))
	if ack.Sequence != want || ack.BatchSize != uint64(len(recs)) {
		p.markResync()
		return 0, fmt.Errorf("topic %q partition %d: JetStream acknowledged %d records ending at sequence %d, expected %d ending at %d (%w)",
			topic, partition, ack.BatchSize, ack.Sequence, len(recs), want, logstore.ErrStorage)
	}
	p.mu.Lock()
	for i := range recs {
		off := base + int64(i)
		if off != p.indexed {
			continue // indexed by the consumer already, or the index lags and the consumer will
		}
		if recs[i].Key != nil {
			p.keys.Add(recs[i].Key, off, recs[i].Value == nil)
		}
		p.indexed++
		p.frameBytes += int64(len(msgs[i].Data))
		p.frames++
	}
	end := base + int64(len(recs))
	moved := end > p.hw
	p.hw = max(p.hw, end)
	p.mu.Unlock()
	if moved {
		p.watch.Notify()
	}
	return base, nil
}

func (p *partition) markResync() {
	p.mu.Lock()
	p.resync = true
	p.mu.Unlock()
}

// resyncTail re-reads the stream's end after an append whose outcome is
// unknown, so the next append expects the real end. appendMu is held.
func (p *partition) resyncTail(ctx context.Context) error {
	p.mu.Lock()
	need := p.resync
	p.mu.Unlock()
	if !need {
		return nil
	}
	st, err := p.s.js.Stream(ctx, p.stream)
	if err != nil {
		return p.streamErr(ctx, "read the end of", err)
	}
	last := int64(st.CachedInfo().State.LastSeq)
	p.mu.Lock()
	moved := last > p.hw
	p.hw = max(p.hw, last)
	p.resync = false
	p.mu.Unlock()
	if moved {
		p.watch.Notify()
	}
	return nil
}

// Read implements logstore.Store. Reads are clamped to [log start, high
// watermark) as this instance knows them; records come from direct gets
// (any replica), and from the stream leader when a replica has not applied
// them yet.
func (s *Store) Read(ctx context.Context, topic string, partition int32, offset int64, maxRecords, maxBytes int) ([]logstore.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := logstore.ValidateReadLimits(maxRecords, maxBytes); err != nil {
		return nil, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	p, err := s.readyPartition(octx, topic, partition)
	if err != nil {
		return nil, err
	}
	ls, hw, err := p.bounds()
	if err != nil {
		return nil, err
	}
	if offset < ls || offset > hw {
		return nil, p.outOfRange(offset, ls, hw)
	}
	if offset == hw {
		return nil, nil
	}
	return p.fetch(octx, ctx, offset, int(min(int64(maxRecords), hw-offset)), maxBytes)
}

func (p *partition) outOfRange(offset, ls, hw int64) error {
	return fmt.Errorf("topic %q partition %d: offset %d is outside [log start %d, high watermark %d]: %w",
		p.topic, p.id, offset, ls, hw, logstore.ErrOffsetOutOfRange)
}

// Bounds of one direct-get batch answer: readSlack above what the caller
// still wants, at most maxReadBytes.
const (
	readSlack    = 64 << 10
	maxReadBytes = 8 << 20
)

// fetch reads up to want records from offset on (all below the high
// watermark), stopping before the record that would pass maxBytes (the
// first is always taken).
func (p *partition) fetch(ctx, callerCtx context.Context, offset int64, want, maxBytes int) ([]logstore.Record, error) {
	out := make([]logstore.Record, 0, min(want, readBatch))
	bytes, next := 0, offset
	// take adds the message at sequence seq; done reports that fetch
	// should stop; a jump past next means next was purged.
	take := func(seq uint64, data []byte) (done bool, err error) {
		off := int64(seq) - 1
		if off > next {
			p.raiseLogStart(off)
			if len(out) == 0 {
				_, hw, _ := p.bounds()
				return true, p.outOfRange(next, off, hw)
			}
			return true, nil
		}
		rec, err := logstore.DecodeRecord(data)
		if err != nil {
			return true, fmt.Errorf("topic %q partition %d offset %d: %w", p.topic, p.id, off, err)
		}
		if rec.Offset != off {
			return true, fmt.Errorf("topic %q partition %d: the record at offset %d says it is offset %d: %w",
				p.topic, p.id, off, rec.Offset, logstore.ErrCorrupt)
		}
		sz := rec.Size()
		if len(out) > 0 && bytes+sz > maxBytes {
			return true, nil
		}
		out = append(out, rec)
		bytes += sz
		next++
		return bytes >= maxBytes || len(out) >= want, nil
	}
	for len(out) < want {
		n := min(want-len(out), readBatch)
		// Ask for about the bytes still wanted (frames are a little larger
		// than records), bounded so one answer stays small; an answer that
		// holds nothing falls back to the single get below.
		budget := int(min(int64(maxBytes-bytes)+readSlack, maxReadBytes))
		it, err := jetstreamext.GetBatch(ctx, p.s.js, p.stream, n, jetstreamext.GetBatchSeq(uint64(next)+1),
			jetstreamext.GetBatchMaxBytes(budget))
		if err != nil {
			return nil, p.streamErr(callerCtx, "read", err)
		}
		progressed := false
		for m, err := range it {
			if err != nil {
				if errors.Is(err, jetstreamext.ErrNoMessages) {
					break
				}
				return nil, p.streamErr(callerCtx, "read", err)
			}
			if int64(m.Sequence)-1 < next {
				continue
			}
			done, err := take(m.Sequence, m.Data)
			if err != nil {
				return nil, err
			}
			if done {
				return out, nil
			}
			progressed = true
		}
		if progressed {
			continue
		}
		// The replica that answered has not applied next yet (direct gets
		// are served by followers too): ask the leader.
		m, err := p.leaderGet(ctx, next)
		if errors.Is(err, logstore.ErrOffsetOutOfRange) {
			if len(out) > 0 {
				return out, nil
			}
			return nil, err
		}
		if err != nil {
			return nil, p.streamErr(callerCtx, "read", err)
		}
		done, err := take(m.Sequence, m.Data)
		if err != nil {
			return nil, err
		}
		if done {
			return out, nil
		}
	}
	return out, nil
}

// leaderGet reads the record at off from the stream leader. Even the
// leader may not show a record it has acknowledged for a moment (its store
// applies committed entries asynchronously), so "no message" is trusted
// only when the stream's first sequence has passed off (purged: the log
// start is raised and ErrOffsetOutOfRange returned); otherwise it asks
// again, backing off, until ctx ends.
func (p *partition) leaderGet(ctx context.Context, off int64) (sljs.StoredMsg, error) {
	wait := time.Millisecond
	for {
		m, err := sljs.GetMsg(ctx, p.s.nc, p.stream, uint64(off)+1)
		if sljs.APICode(err) != sljs.CodeNoMessageFound {
			return m, err
		}
		st, err := p.s.js.Stream(ctx, p.stream)
		if err != nil {
			return sljs.StoredMsg{}, err
		}
		if first := int64(st.CachedInfo().State.FirstSeq); first-1 > off {
			p.raiseLogStart(first - 1)
			_, hw, _ := p.bounds()
			return sljs.StoredMsg{}, p.outOfRange(off, first-1, hw)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return sljs.StoredMsg{}, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// raiseLogStart moves the known log start to ls after a read found the
// records below it purged (by another instance, or by retention).
func (p *partition) raiseLogStart(ls int64) {
	p.mu.Lock()
	moved := ls > p.logStart
	if moved {
		p.logStart = ls
	}
	p.mu.Unlock()
	if moved {
		p.watch.Notify()
	}
}

// Bounds implements logstore.Store: this instance's view of the partition.
func (s *Store) Bounds(topic string, partition int32) (int64, int64, error) {
	p, err := s.readyPartition(context.Background(), topic, partition)
	if err != nil {
		return 0, 0, err
	}
	return p.bounds()
}

// OffsetForTimestamp implements logstore.Store by scanning the partition
// from its log start (JetStream stamps its own receive time, so the
// records' own timestamps, which need not ascend, are only in the frames).
func (s *Store) OffsetForTimestamp(ctx context.Context, topic string, partition int32, ts int64) (int64, int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	p, err := s.readyPartition(octx, topic, partition)
	if err != nil {
		return 0, 0, err
	}
	ls, hw, err := p.bounds()
	if err != nil {
		return 0, 0, err
	}
	for next := ls; next < hw; {
		recs, err := p.fetch(octx, ctx, next, int(min(hw-next, 4*readBatch)), 1<<30)
		if errors.Is(err, logstore.ErrOffsetOutOfRange) {
			// Purged while scanning: go on from the new log start.
			if ls, _, err = p.bounds(); err != nil {
				return 0, 0, err
			}
			next = max(next+1, ls)
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		for _, r := range recs {
			if r.Timestamp >= ts {
				return r.Offset, r.Timestamp, nil
			}
		}
		next = recs[len(recs)-1].Offset + 1
	}
	return -1, -1, nil
}

// Watch implements logstore.Store. It fires on this instance's appends and
// purges at once, and on other writers' appends when the ordered consumer
// delivers them.
func (s *Store) Watch(topic string, partition int32) (<-chan struct{}, error) {
	p, err := s.readyPartition(context.Background(), topic, partition)
	if err != nil {
		return nil, err
	}
	return p.watch.Wait()
}

// DeleteRecordsBefore implements logstore.Store: an offset above the high
// watermark is refused before anything is sent (JetStream would move the
// stream's end instead, leaving a gap of offsets); otherwise the stream is
// purged below sequence offset+1 and the log start becomes
// max(old, offset). JetStream answers once the purge is committed by a
// quorum and applied on the leader.
func (s *Store) DeleteRecordsBefore(ctx context.Context, topic string, partition int32, offset int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	p, err := s.readyPartition(octx, topic, partition)
	if err != nil {
		return 0, err
	}
	ls, hw, err := p.bounds()
	if err != nil {
		return 0, err
	}
	if offset <= ls {
		return ls, nil
	}
	if offset > hw {
		return 0, fmt.Errorf("topic %q partition %d: purge to offset %d beyond the high watermark %d: %w",
			topic, partition, offset, hw, logstore.ErrOffsetOutOfRange)
	}
	if _, err := sljs.Purge(octx, s.nc, p.stream, uint64(offset)+1); err != nil {
		return 0, p.streamErr(ctx, "purge", err)
	}
	p.raiseLogStart(offset)
	ls, _, err = p.bounds()
	return ls, err
}

// TopicID implements logstore.KeyIndexer.
func (s *Store) TopicID(name string) (string, error) { return s.topics.TopicID(name) }

// indexFor returns the partition's key index if it covers every offset
// below min(end, high watermark), else ErrIndexNotReady.
func (s *Store) indexFor(ctx context.Context, topic string, partition int32, end int64) (*logstore.MemKeyIndex, error) {
	p, err := s.readyPartition(ctx, topic, partition)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone != nil {
		return nil, p.gone
	}
	if p.indexed < min(end, p.hw) {
		return nil, fmt.Errorf("topic %q partition %d: key index covers offsets below %d, not yet %d: %w",
			topic, partition, p.indexed, min(end, p.hw), logstore.ErrIndexNotReady)
	}
	return p.keys, nil
}

// ScanKeys implements logstore.KeyIndexer over the in-memory index this
// instance keeps; while it is rebuilt from the stream it answers
// ErrIndexNotReady.
func (s *Store) ScanKeys(ctx context.Context, topic string, partition int32, prefix []byte, end int64) (logstore.KeyCursor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	keys, err := s.indexFor(ctx, topic, partition, end)
	if err != nil {
		return nil, err
	}
	return keys.Scan(prefix, end), nil
}

// CountKeys implements logstore.KeyCounter with an exact count.
func (s *Store) CountKeys(ctx context.Context, topic string, partition int32, prefix []byte, end, limit int64) (int64, int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	keys, err := s.indexFor(ctx, topic, partition, end)
	if err != nil {
		return 0, 0, err
	}
	n := keys.Count(prefix, end, limit)
	return n, n, nil
}

// RangeStats implements logstore.KeyIndexer: the records in [from, end)
// clamped to the partition's bounds, and their bytes estimated from the
// average frame size this instance has seen.
func (s *Store) RangeStats(topic string, partition int32, from, end int64) (int64, int64, error) {
	p, err := s.readyPartition(context.Background(), topic, partition)
	if err != nil {
		return 0, 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone != nil {
		return 0, 0, p.gone
	}
	from, end = max(from, p.logStart), min(end, p.hw)
	n := max(end-from, 0)
	if p.frames == 0 {
		return n, 0, nil
	}
	return n, n * p.frameBytes / p.frames, nil
}

// SegmentEnd implements logstore.KeyIndexer: a stream is one segment.
func (s *Store) SegmentEnd(topic string, partition int32, offset int64) (int64, error) {
	_, hw, err := s.Bounds(topic, partition)
	return hw, err
}

// ReadEntry implements logstore.EntryReader by offset.
func (s *Store) ReadEntry(ctx context.Context, topic string, partition int32, ent logstore.KeyEntry) (logstore.Record, error) {
	recs, err := s.Read(ctx, topic, partition, ent.Offset, 1, 1)
	if err != nil {
		return logstore.Record{}, err
	}
	if len(recs) == 0 {
		return logstore.Record{}, fmt.Errorf("topic %q partition %d: offset %d is at the high watermark: %w",
			topic, partition, ent.Offset, logstore.ErrOffsetOutOfRange)
	}
	return recs[0], nil
}

// PurgedTombstonesBelow implements logstore.KeyIndexer: the JetStream store
// does not compact (see doc.go), so no tombstone was ever removed.
func (s *Store) PurgedTombstonesBelow(topic string, partition int32) (int64, error) {
	_, _, err := s.Bounds(topic, partition)
	return 0, err
}

// Resync re-reads the partition stream's end and start: an instance that
// has just become a partition's owner calls it so that its first append
// expects the end the previous owner left (rather than being fenced by
// records its consumer has not delivered yet) and its purges and reads
// start from the log start the previous owner left.
func (s *Store) Resync(ctx context.Context, topic string, partition int32) error {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	p, err := s.readyPartition(octx, topic, partition)
	if err != nil {
		return err
	}
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	st, err := p.s.js.Stream(octx, p.stream)
	if err != nil {
		return p.streamErr(ctx, "read the bounds of", err)
	}
	state := st.CachedInfo().State
	last := int64(state.LastSeq)
	p.mu.Lock()
	moved := last > p.hw
	p.hw = max(p.hw, last)
	p.resync = false
	p.mu.Unlock()
	if state.FirstSeq > 0 {
		p.raiseLogStart(min(int64(state.FirstSeq)-1, last))
	}
	if moved {
		p.watch.Notify()
	}
	return nil
}

// unwritableFor is how long a failed append keeps its partition listed
// by Unwritable when no append has been tried since.
const unwritableFor = 30 * time.Second

// Unwritable lists the partitions whose last append failed with a storage
// error (no leader within --nats-write-timeout, NATS unreachable) and
// has not succeeded since, within the last unwritableFor: what /readyz
// names while it lasts (docs/cluster.md). Err is the failure.
func (s *Store) Unwritable() []logstore.PartitionInfo {
	var out []logstore.PartitionInfo
	now := time.Now()
	for _, t := range s.topics.All() {
		for _, p := range t.parts {
			p.mu.Lock()
			if p.writeErr != nil && now.Sub(p.writeErrAt) < unwritableFor {
				out = append(out, logstore.PartitionInfo{Partition: p.id, Err: fmt.Errorf("%s-%d: %w", p.topic, p.id, p.writeErr)})
			}
			p.mu.Unlock()
		}
	}
	return out
}
