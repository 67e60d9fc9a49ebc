package sharegroup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Dead-letter topics (KIP-1191): a record archived by the delivery-count
// limit or by REJECT in a group with a dead-letter topic becomes ARCHIVING
// (durable) instead of ARCHIVED; this worker copies it to the dead-letter
// topic and then makes it ARCHIVED. See doc.go "Dead-letter topics" and
// docs/dead-letter-topics.md.

// Headers of a dead-letter copy (decimal strings), after the original
// record's own headers.
const (
	DLQHeaderSourceTopic     = "dlq.source.topic"
	DLQHeaderSourcePartition = "dlq.source.partition"
	DLQHeaderSourceOffset    = "dlq.source.offset"
	DLQHeaderGroup           = "dlq.group"
	DLQHeaderDeliveryCount   = "dlq.delivery.count"
)

const (
	dlqBatchRecords = 500      // ARCHIVING offsets of one share-partition per pass
	dlqBatchBytes   = 16 << 20 // about this many bytes of source records per pass
	dlqScanRecords  = 1000     // records per read when looking for earlier copies
	dlqRetryMin     = 50 * time.Millisecond
	dlqRetryMax     = 5 * time.Second
)

// dlqWorker makes the dead-letter copies of every share-partition that has
// ARCHIVING records, one pass at a time, in its own goroutine. A pass that
// fails (a log or share-state error) leaves the records ARCHIVING and is
// retried with backoff.
type dlqWorker struct {
	m    *Manager
	mu   sync.Mutex // leaf
	due  map[*sharePartition]struct{}
	kick chan struct{} // capacity 1
	pass sync.Mutex    // one pass at a time
}

func newDLQWorker(m *Manager) *dlqWorker {
	return &dlqWorker{m: m, due: make(map[*sharePartition]struct{}), kick: make(chan struct{}, 1)}
}

// add schedules p's ARCHIVING records for copying. Any lock may be held.
func (w *dlqWorker) add(p *sharePartition) {
	w.mu.Lock()
	w.due[p] = struct{}{}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run is the worker's goroutine; it ends when the manager closes.
func (w *dlqWorker) run(ctx context.Context) {
	defer w.m.bg.Done()
	var retry *time.Timer
	var retryC <-chan time.Time
	backoff := time.Duration(0)
	for {
		select {
		case <-w.m.closing:
			if retry != nil {
				retry.Stop()
			}
			return
		case <-w.kick:
		case <-retryC:
		}
		if err := w.runPass(ctx); err != nil {
			backoff = min(max(2*backoff, dlqRetryMin), dlqRetryMax)
			if retry == nil {
				retry = time.NewTimer(backoff)
			} else {
				retry.Reset(backoff)
			}
			retryC = retry.C
			continue
		}
		backoff, retryC = 0, nil
	}
}

// runPass copies one batch of every due share-partition. A share-partition
// with more to do is due again (and the worker kicked); one that failed is
// due again and the first error is returned (retried after a backoff).
func (w *dlqWorker) runPass(ctx context.Context) error {
	w.pass.Lock()
	defer w.pass.Unlock()
	return w.runPassLocked(ctx)
}

func (w *dlqWorker) runPassLocked(ctx context.Context) error {
	w.mu.Lock()
	due := make([]*sharePartition, 0, len(w.due))
	for p := range w.due {
		due = append(due, p)
	}
	clear(w.due)
	w.mu.Unlock()
	var first error
	for _, p := range due {
		more, err := p.deadLetterPass(ctx)
		switch {
		case err != nil:
			w.mu.Lock()
			w.due[p] = struct{}{}
			w.mu.Unlock()
			if first == nil {
				first = err
			}
			w.m.log.Warn("dead-letter copy failed; the records stay ARCHIVING and are retried",
				"group", p.g.id, "topic", p.topic, "partition", p.part, "err", err)
		case more:
			w.add(p)
		}
	}
	return first
}

// flush runs passes until nothing is due (tests), or returns the first
// error.
func (w *dlqWorker) flush(ctx context.Context) error {
	w.pass.Lock() // after a pass in progress
	defer w.pass.Unlock()
	for {
		w.mu.Lock()
		n := len(w.due)
		w.mu.Unlock()
		if n == 0 {
			return nil
		}
		if err := w.runPassLocked(ctx); err != nil {
			return err
		}
	}
}

// dlqSource is one ARCHIVING range to copy.
type dlqSource struct {
	first, last int64
	count       int16
}

// deadLetterPass copies up to dlqBatchRecords ARCHIVING records of p to
// the group's dead-letter topic and makes them ARCHIVED. It reports whether
// ARCHIVING records are left. The order makes the copy exactly-once:
//
//  1. the ARCHIVING state is durable before anything is copied (a crash
//     before that redelivers the record and copies nothing);
//  2. the copies are appended in one atomic append;
//  3. the records become ARCHIVED (a background write).
//
// If the outcome of step 2 is unknown — a crash between 2 and 3 (the
// records are ARCHIVING at recovery) or a failed append — the next pass
// first looks for the copies in the dead-letter partition (identified by
// their dlq.group and dlq.source.* headers) and appends only the missing
// ones.
func (p *sharePartition) deadLetterPass(ctx context.Context) (more bool, err error) {
	m := p.g.m
	p.mu.Lock()
	if p.status != spLive || p.offline != "" {
		p.mu.Unlock()
		return false, nil
	}
	if code, msg := p.ensureDurable(); code != apierr.None {
		p.mu.Unlock()
		return false, errors.New(msg)
	}
	var todo []dlqSource
	budget := int64(dlqBatchRecords)
	for i := range p.runs {
		r := &p.runs[i]
		if r.state != stArchiving {
			continue
		}
		if budget == 0 {
			more = true
			break
		}
		last := min(r.last, r.first+budget-1)
		todo = append(todo, dlqSource{first: r.first, last: last, count: r.count})
		budget -= last - r.first + 1
		if last < r.last {
			more = true
			break
		}
	}
	topic := p.g.config().deadLetter
	check := p.dlqCheck
	ticket := p.lastTicket.Load()
	p.mu.Unlock()
	if len(todo) == 0 {
		return false, nil
	}
	// 1. The ARCHIVING state must be durable before its copy exists.
	if ticket != 0 {
		if err := m.state.Wait(ticket); err != nil {
			return more, fmt.Errorf("share state not durable: %w", err)
		}
	}
	copies, skipped, readEnd, err := p.deadLetterCopies(ctx, todo)
	if err != nil {
		return more, err
	}
	// readEnd < the last todo offset: the byte budget cut the batch.
	if readEnd < todo[len(todo)-1].last {
		more = true
		for len(todo) > 0 && todo[len(todo)-1].first > readEnd {
			todo = todo[:len(todo)-1]
		}
		todo[len(todo)-1].last = readEnd
	}
	why := ""
	dp := int32(0)
	if len(copies) > 0 {
		var info logstore.TopicInfo
		info, why, err = m.deadLetterTopic(ctx, topic)
		if err != nil {
			return more, err
		}
		if why == "" {
			dp = p.part % info.Partitions
		}
	}
	appended := 0
	if len(copies) > 0 && why == "" {
		if check {
			have, err := m.findCopies(ctx, topic, dp, p.g.id, p.topic, p.part, todo[0].first, todo[len(todo)-1].last)
			if err != nil {
				return more, fmt.Errorf("looking for earlier copies in %s/%d: %w", topic, dp, err)
			}
			if len(have) > 0 {
				copies = slices.DeleteFunc(copies, func(r logstore.Record) bool { return have[r.Offset] })
			}
		}
		if len(copies) > 0 {
			for i := range copies {
				copies[i].Offset = 0
			}
			if _, err := m.deadLetters().AppendPartition(ctx, topic, dp, copies); err != nil {
				// Whether the append happened is unknown: look first next time.
				p.mu.Lock()
				p.dlqCheck = true
				p.mu.Unlock()
				return more, fmt.Errorf("appending to %s/%d: %w", topic, dp, err)
			}
			appended = len(copies)
			if h := m.opts.DeadLetterAfterAppend; h != nil {
				h()
			}
		}
	} else if len(copies) > 0 {
		skipped += len(copies)
	}
	if why != "" {
		m.log.Warn("records archived without their dead-letter copy", "group", p.g.id, "topic", p.topic, "partition", p.part,
			"first_offset", todo[0].first, "last_offset", todo[len(todo)-1].last, "dead_letter_topic", topic, "reason", why)
	}
	// 3. ARCHIVED: written in the background; a crash before it is durable
	// finds the records ARCHIVING, and their copies by looking.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status != spLive {
		return false, nil
	}
	var delta []sharestate.Range
	for _, s := range todo {
		a := max(s.first, p.spso)
		if a > s.last || a > p.speo {
			continue
		}
		i := p.splitAt(a)
		j := p.splitAt(min(s.last, p.speo) + 1)
		for x := i; x < j; x++ {
			if r := &p.runs[x]; r.state == stArchiving {
				*r = terminalRun(r.first, r.last, stArchived)
				delta = appendDur(delta, r.durable())
			}
		}
		p.mergeRuns(i-1, j)
	}
	if !more {
		p.dlqCheck = false
	}
	p.g.dlqCopied.Add(uint64(appended))
	p.g.dlqSkipped.Add(uint64(skipped))
	m.dlqCopied.Add(uint64(appended))
	m.dlqSkipped.Add(uint64(skipped))
	if len(delta) > 0 {
		p.advance()
		p.writeBackground(delta)
		p.signal()
	}
	return more, nil
}

// deadLetterCopies reads the source records of todo and builds their
// copies (Offset holds the source offset). Offsets with no record to copy
// (compacted or purged away, or unreadable) are counted in skipped. readEnd
// is the last offset covered (the byte budget may stop early).
func (p *sharePartition) deadLetterCopies(ctx context.Context, todo []dlqSource) (copies []logstore.Record, skipped int, readEnd int64, err error) {
	m := p.g.m
	if p.topicGone(ctx) { // never copy a re-created topic's records
		return nil, 0, 0, logstore.ErrUnknownTopic
	}
	ls, _, err := m.store.Bounds(p.topic, p.part)
	if err != nil {
		return nil, 0, 0, err
	}
	budget := int64(dlqBatchBytes)
	for _, s := range todo {
		off, one := s.first, false
		for off <= s.last {
			if off < ls { // purged: nothing to copy
				n := min(s.last, ls-1) - off + 1
				skipped += int(n)
				off += n
				continue
			}
			if budget <= 0 {
				return copies, skipped, off - 1, nil
			}
			n := int(s.last - off + 1)
			if one {
				n = 1
			}
			recs, err := m.store.Read(ctx, p.topic, p.part, off, n, int(min(budget, math.MaxInt32)))
			switch {
			case errors.Is(err, logstore.ErrCorrupt):
				if one { // off itself is unreadable: nothing to copy
					skipped++
					off++
				}
				one = !one
				continue
			case errors.Is(err, logstore.ErrOffsetOutOfRange):
				if ls, _, err = m.store.Bounds(p.topic, p.part); err != nil {
					return nil, 0, 0, err
				}
				if off < ls {
					continue
				}
				return nil, 0, 0, fmt.Errorf("reading %s offset %d: %w", p, off, logstore.ErrOffsetOutOfRange)
			case err != nil:
				return nil, 0, 0, err
			}
			one = false
			progressed := false
			for i := range recs {
				r := &recs[i]
				if r.Offset > s.last {
					break
				}
				skipped += int(r.Offset - off) // compacted away
				copies = append(copies, dlqCopy(r, p.g.id, p.topic, p.part, s.count))
				budget -= int64(r.Size())
				off, progressed = r.Offset+1, true
			}
			if !progressed { // no record left in [off, s.last]
				skipped += int(s.last - off + 1)
				off = s.last + 1
			}
		}
	}
	return copies, skipped, todo[len(todo)-1].last, nil
}

// dlqCopy is the dead-letter copy of r: its key, value, timestamp and
// headers, then the dlq.* headers. Offset is r's (the source offset) until
// the append.
func dlqCopy(r *logstore.Record, group, topic string, part int32, count int16) logstore.Record {
	hs := make([]logstore.Header, 0, len(r.Headers)+5)
	hs = append(hs, r.Headers...)
	hs = append(hs,
		logstore.Header{Key: DLQHeaderSourceTopic, Value: []byte(topic)},
		logstore.Header{Key: DLQHeaderSourcePartition, Value: strconv.AppendInt(nil, int64(part), 10)},
		logstore.Header{Key: DLQHeaderSourceOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
		logstore.Header{Key: DLQHeaderGroup, Value: []byte(group)},
		logstore.Header{Key: DLQHeaderDeliveryCount, Value: strconv.AppendInt(nil, int64(count), 10)},
	)
	return logstore.Record{Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value, Headers: hs}
}

// deadLetterTopic returns the dead-letter topic, creating it (one
// partition) when it is missing and auto-creation is on. why is set, with
// no error, when the copies cannot be made and the records are archived
// without them (as Kafka does): no topic configured any more, or a missing
// topic without auto-creation. err is a storage error: retry.
func (m *Manager) deadLetterTopic(ctx context.Context, topic string) (info logstore.TopicInfo, why string, err error) {
	if topic == "" {
		return info, "the group has no dead-letter topic any more", nil
	}
	info, err = m.store.TopicInfo(ctx, topic)
	if errors.Is(err, logstore.ErrUnknownTopic) {
		if !m.opts.DLQAutoCreateTopics {
			return info, "the dead-letter topic does not exist and --dlq-auto-create-topics is off", nil
		}
		info, err = m.store.CreateTopic(ctx, topic, 1, logstore.TopicConfig{})
		if errors.Is(err, logstore.ErrTopicExists) {
			info, err = m.store.TopicInfo(ctx, topic)
		}
		if err == nil {
			m.log.Info("dead-letter topic created", "topic", topic)
		}
	}
	if err != nil {
		return info, "", fmt.Errorf("dead-letter topic %q: %w", topic, err)
	}
	return info, "", nil
}

// findCopies reads the whole dead-letter partition and returns the source
// offsets in [lo, hi] of group's copies from topic/part found there (the
// last dlq.* header of each name counts: a copy of a copy keeps the
// original's headers before its own).
func (m *Manager) findCopies(ctx context.Context, topic string, dp int32, group, src string, part int32, lo, hi int64) (map[int64]bool, error) {
	ls, hw, err := m.store.Bounds(topic, dp)
	if err != nil {
		return nil, err
	}
	have := map[int64]bool{}
	ps := strconv.FormatInt(int64(part), 10)
	for off := ls; off < hw; {
		recs, err := m.store.Read(ctx, topic, dp, off, dlqScanRecords, 4<<20)
		if errors.Is(err, logstore.ErrOffsetOutOfRange) {
			if ls, _, err = m.store.Bounds(topic, dp); err != nil {
				return nil, err
			}
			off = max(off, ls)
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			break
		}
		for i := range recs {
			var g, t, pp, o []byte
			for _, h := range recs[i].Headers {
				switch h.Key {
				case DLQHeaderGroup:
					g = h.Value
				case DLQHeaderSourceTopic:
					t = h.Value
				case DLQHeaderSourcePartition:
					pp = h.Value
				case DLQHeaderSourceOffset:
					o = h.Value
				}
			}
			if string(g) != group || string(t) != src || string(pp) != ps {
				continue
			}
			if v, err := strconv.ParseInt(string(o), 10, 64); err == nil && v >= lo && v <= hi {
				have[v] = true
			}
		}
		off = recs[len(recs)-1].Offset + 1
	}
	return have, nil
}

// DeadLetterFlush makes the pending dead-letter copies now, in the calling
// goroutine, and returns the first failure (tests and tools; the worker
// does the same in the background).
func (m *Manager) DeadLetterFlush(ctx context.Context) error {
	if !m.enter() {
		return ErrClosed
	}
	defer m.leave()
	return m.dlq.flush(ctx)
}

// Appender appends records to one partition (Options.DeadLetters).
type Appender interface {
	// AppendPartition appends recs, their timestamps kept, and returns the
	// first one's offset.
	AppendPartition(ctx context.Context, topic string, part int32, recs []logstore.Record) (int64, error)
}

// storeAppender is the log store as an Appender.
type storeAppender struct{ logstore.Store }

func (s storeAppender) AppendPartition(ctx context.Context, topic string, part int32, recs []logstore.Record) (int64, error) {
	return s.Append(ctx, topic, part, recs)
}

// deadLetters is where dead-letter copies are appended.
func (m *Manager) deadLetters() Appender {
	if m.opts.DeadLetters != nil {
		return m.opts.DeadLetters
	}
	return storeAppender{m.store}
}
