package jslog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Options configures a Store.
type Options struct {
	// Prefix names every stream, subject and bucket of the store
	// (default "SL"); stores with different prefixes share nothing.
	Prefix string
	// Replicas is the replica count of every partition stream and of the
	// metadata bucket (default 3).
	Replicas int
	// Timeout bounds each call whose context has no deadline, and the
	// calls without a context (Bounds, Watch, the key index's) when they
	// must first load a partition (default 10 s).
	Timeout time.Duration
	// MaxBatchRecords is the most records one Append may carry: one
	// append is one atomic JetStream batch, which the server caps
	// (jetstream.limits.batch.max_size, 1000 by default). Default 1000.
	MaxBatchRecords int
	// WriteTimeout bounds each append's wait for JetStream's
	// acknowledgement, within the call's own deadline (default 2 s,
	// --nats-write-timeout): a stream without a leader fails its appends
	// with a storage error (retryable) instead of holding them to the
	// client's deadline. Unwritable lists the partitions it failed.
	WriteTimeout time.Duration
}

// recordFormat names the payload of every stream message, recorded in the
// stream metadata.
const recordFormat = "sharelog-record-frame-v1"

// createParallel is how many streams CreateTopic and DeleteTopic create or
// delete at once.
const createParallel = 8

// readBatch is the most messages one direct-get batch request asks for.
const readBatch = 256

// Store is a logstore.Store and logstore.KeyIndexer on a NATS JetStream
// cluster; see the package documentation for the mapping.
//
// Locks: the catalog's lock (topics), then partition.mu;
// partition.appendMu and partition.openMu are taken before partition.mu,
// never under it; the notifiers' locks are leaves.
type Store struct {
	nc       *nats.Conn
	js       njs.JetStream
	kv       njs.KeyValue
	prefix   string
	replicas int
	timeout  time.Duration
	writeTO  time.Duration
	maxBatch int

	// topics is the topic map; its Update keeps the highest metadata
	// revision applied per topic name.
	topics *logstore.Catalog[*topic]
	// alterMu serialises this instance's AlterTopic calls (instances
	// race through the entry's revision); held during their I/O.
	alterMu sync.Mutex

	stopWatch context.CancelFunc
	watchDone chan struct{}
}

var (
	_ logstore.Store      = (*Store)(nil)
	_ logstore.KeyIndexer = (*Store)(nil)
)

type topic struct {
	info  logstore.TopicInfo
	rev   uint64
	parts []*partition
}

// Info implements logstore.CatalogTopic.
func (t *topic) Info() logstore.TopicInfo { return t.info }

// topicMeta is a topic's metadata entry, the value of its key in the
// metadata bucket.
type topicMeta struct {
	Name          string `json:"name"`
	ID            string `json:"id"`
	Partitions    int32  `json:"partitions"`
	SegmentBytes  int64  `json:"segment_bytes"`
	RetentionMs   int64  `json:"retention_ms"`
	CleanupPolicy string `json:"cleanup_policy"`
	// Added later: absent in older entries, which then take the
	// defaults (their zero values).
	DeleteRetentionMs      int64    `json:"delete_retention_ms,omitempty"`
	MinCleanableDirtyRatio float64  `json:"min_cleanable_dirty_ratio,omitempty"`
	RetentionBytes         int64    `json:"retention_bytes,omitempty"`
	SegmentMs              int64    `json:"segment_ms,omitempty"`
	MaxMessageBytes        int64    `json:"max_message_bytes,omitempty"`
	CompressionType        string   `json:"compression_type,omitempty"`
	MessageTimestampType   string   `json:"message_timestamp_type,omitempty"`
	MinInsyncReplicas      int32    `json:"min_insync_replicas,omitempty"`
	Overrides              []string `json:"overrides,omitempty"`
}

// metaOf is info's metadata entry.
func metaOf(info logstore.TopicInfo) topicMeta {
	c := info.Config
	return topicMeta{Name: info.Name, ID: info.ID, Partitions: info.Partitions,
		SegmentBytes: c.SegmentBytes, RetentionMs: c.RetentionMs, CleanupPolicy: c.CleanupPolicy,
		DeleteRetentionMs: c.DeleteRetentionMs, MinCleanableDirtyRatio: c.MinCleanableDirtyRatio,
		RetentionBytes: c.RetentionBytes, SegmentMs: c.SegmentMs, MaxMessageBytes: c.MaxMessageBytes,
		CompressionType: c.CompressionType, MessageTimestampType: c.MessageTimestampType,
		MinInsyncReplicas: c.MinInsyncReplicas, Overrides: c.Overrides}
}

// info is the topic description m records.
func (m topicMeta) info() logstore.TopicInfo {
	return logstore.TopicInfo{Name: m.Name, ID: m.ID, Partitions: m.Partitions, Config: logstore.TopicConfig{
		SegmentBytes: m.SegmentBytes, RetentionMs: m.RetentionMs, CleanupPolicy: m.CleanupPolicy,
		DeleteRetentionMs: m.DeleteRetentionMs, MinCleanableDirtyRatio: m.MinCleanableDirtyRatio,
		RetentionBytes: m.RetentionBytes, SegmentMs: m.SegmentMs, MaxMessageBytes: m.MaxMessageBytes,
		CompressionType: m.CompressionType, MessageTimestampType: m.MessageTimestampType,
		MinInsyncReplicas: m.MinInsyncReplicas, Overrides: m.Overrides,
	}}
}

func metaKey(name string) string { return "topic." + sljs.HexKey(name) }

// Open opens the store over nc (which the caller keeps and closes after
// Close): it creates the metadata bucket if needed, loads every topic and
// then follows the bucket, so topics created or deleted through other
// instances appear here too. Partitions are loaded when first used.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Store, error) {
	if o.Prefix == "" {
		o.Prefix = sljs.DefaultPrefix
	}
	if err := sljs.CheckPrefix(o.Prefix); err != nil {
		return nil, fmt.Errorf("%w: %w", logstore.ErrInvalidArgument, err)
	}
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 2 * time.Second
	}
	if o.MaxBatchRecords <= 0 {
		o.MaxBatchRecords = 1000
	}
	js, err := njs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w (%w)", err, logstore.ErrStorage)
	}
	s := &Store{
		nc: nc, js: js, prefix: o.Prefix, replicas: o.Replicas, timeout: o.Timeout, writeTO: o.WriteTimeout, maxBatch: o.MaxBatchRecords,
		topics: logstore.NewCatalog[*topic](), watchDone: make(chan struct{}),
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	bucket := sljs.MetaBucket(o.Prefix)
	err = sljs.Retry(octx, func(ctx context.Context) (err error) {
		s.kv, err = js.CreateKeyValue(ctx, njs.KeyValueConfig{
			Bucket:      bucket,
			Description: "sharelog topic metadata",
			History:     1,
			Storage:     njs.FileStorage,
			Replicas:    o.Replicas,
		})
		return err
	})
	if errors.Is(err, njs.ErrBucketExists) {
		err = sljs.Retry(octx, func(ctx context.Context) (err error) {
			s.kv, err = js.KeyValue(ctx, bucket) // as the operator left it
			return err
		})
	}
	if err == nil {
		err = sljs.WaitLeader(octx, js, "KV_"+bucket)
	}
	if err != nil {
		return nil, sljs.Wrap(ctx, "open the topic metadata bucket", err, logstore.ErrStorage)
	}
	wctx, stop := context.WithCancel(context.Background())
	var w njs.KeyWatcher
	// Creating the watch's consumer can time out while the meta layer is
	// busy (a bucket another instance has just created): transient.
	err = sljs.Retry(octx, func(context.Context) (err error) {
		w, err = s.kv.WatchAll(wctx)
		return err
	})
	if err != nil {
		stop()
		return nil, sljs.Wrap(ctx, "watch the topic metadata bucket", err, logstore.ErrStorage)
	}
	// The watcher sends every current entry, then nil.
	for loaded := false; !loaded; {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				stop()
				return nil, fmt.Errorf("topic metadata watch ended while loading (%w)", logstore.ErrStorage)
			}
			if e == nil {
				loaded = true
				continue
			}
			s.applyMeta(e)
		case <-octx.Done():
			stop()
			return nil, sljs.Wrap(ctx, "load the topic metadata", octx.Err(), logstore.ErrStorage)
		}
	}
	s.stopWatch = stop
	go s.watchMeta(wctx, w)
	return s, nil
}

// watchMeta applies metadata changes until the watch is stopped.
func (s *Store) watchMeta(ctx context.Context, w njs.KeyWatcher) {
	defer close(s.watchDone)
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil {
				s.applyMeta(e)
			}
		case <-ctx.Done():
			return
		}
	}
}

// applyMeta applies one metadata entry unless an equal or newer revision of
// its key was applied already (this instance's own creates and deletes are
// applied before the watch delivers them).
func (s *Store) applyMeta(e njs.KeyValueEntry) {
	tok, isTopic := strings.CutPrefix(e.Key(), "topic.")
	name, err := sljs.UnhexKey(tok)
	if !isTopic || err != nil {
		return
	}
	if e.Operation() != njs.KeyValuePut { // deleted or purged
		s.applyTopic(name, e.Revision(), nil)
		return
	}
	var m topicMeta
	if err := json.Unmarshal(e.Value(), &m); err != nil || m.Name != name {
		return // not ours to interpret; leave the topic as it was
	}
	s.applyTopic(name, e.Revision(), &m)
}

// applyTopic applies metadata revision rev of topic name: m, or its
// deletion (nil), unless an equal or newer revision was applied already.
// An entry of the same topic ID that changed (AlterTopic, here or
// elsewhere) replaces the topic by one sharing its partitions, with the
// new ones added, and wakes their watchers; another ID replaces it.
func (s *Store) applyTopic(name string, rev uint64, m *topicMeta) {
	var altered *topic
	gone, _ := s.topics.Update(name, rev, func(cur *topic) *topic {
		switch {
		case m == nil:
			return nil
		case cur == nil || cur.info.ID != m.ID:
			return s.newTopic(*m, rev, nil)
		case m.Partitions < cur.info.Partitions:
			return cur // partitions never go; not an entry this store wrote
		}
		info := m.info()
		if cur.info.Partitions == info.Partitions && configEqual(cur.info.Config, info.Config) {
			cur.rev = rev
			return cur
		}
		altered = cur
		return s.newTopic(*m, rev, cur.parts)
	})
	switch {
	case gone != nil && gone == altered:
		for _, p := range gone.parts {
			p.watch.Notify()
		}
	case gone != nil:
		gone.shutdown(logstore.TopicDeletedError(name))
	}
}

// configEqual reports whether two configs are the same.
func configEqual(a, b logstore.TopicConfig) bool {
	if !slices.Equal(a.Overrides, b.Overrides) {
		return false
	}
	a.Overrides, b.Overrides = nil, nil
	return reflect.DeepEqual(a, b)
}

// newTopic is the topic m describes, with the partitions of keep (an
// earlier description of the same topic ID) and new ones after them.
func (s *Store) newTopic(m topicMeta, rev uint64, keep []*partition) *topic {
	t := &topic{
		info:  m.info(),
		rev:   rev,
		parts: make([]*partition, m.Partitions),
	}
	copy(t.parts, keep)
	for i := len(keep); i < len(t.parts); i++ {
		t.parts[i] = &partition{
			s: s, topic: m.Name, id: int32(i),
			stream:  sljs.StreamName(s.prefix, m.ID, int32(i)),
			subject: sljs.Subject(s.prefix, m.ID, int32(i)),
			keys:    logstore.NewMemKeyIndex(),
		}
	}
	return t
}

func (t *topic) shutdown(err error) {
	for _, p := range t.parts {
		p.shutdown(err)
	}
}

// opCtx bounds ctx by the store's timeout if it has no deadline.
func (s *Store) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

func (s *Store) partition(name string, part int32) (*partition, error) {
	t, err := s.topics.LookupPartition(name, part)
	if err != nil {
		return nil, err
	}
	return t.parts[part], nil
}

// readyPartition looks a partition up and loads it, bounded by ctx and the
// store's timeout.
func (s *Store) readyPartition(ctx context.Context, name string, part int32) (*partition, error) {
	p, err := s.partition(name, part)
	if err != nil {
		return nil, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	if err := p.load(octx); err != nil {
		return nil, err
	}
	return p, nil
}

// CreateTopic implements logstore.Store: the partition streams are created
// first, under the new topic ID, then the metadata entry with a create that
// fails if the name is taken — so a topic is visible only with all its
// streams, and a lost race removes the streams it made.
func (s *Store) CreateTopic(ctx context.Context, name string, partitions int32, cfg logstore.TopicConfig) (logstore.TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return logstore.TopicInfo{}, err
	}
	// Validated, and a cheap check of the name: it sees only what this
	// instance knows, and reserves nothing (the metadata entry's
	// create-if-absent below decides between creates).
	info, err := s.topics.Prepare(name, partitions, cfg)
	if err != nil {
		return logstore.TopicInfo{}, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	// Ask the bucket before creating any stream.
	// Retried while transient: a bucket whose replicas are electing a
	// leader has no responder for a moment.
	var found error
	err = sljs.Retry(octx, func(ctx context.Context) error {
		_, found = s.kv.Get(ctx, metaKey(name))
		if found == nil || errors.Is(found, njs.ErrKeyNotFound) {
			return nil
		}
		return found
	})
	switch {
	case err != nil:
		return logstore.TopicInfo{}, sljs.Wrap(ctx, fmt.Sprintf("look up topic %q", name), err, logstore.ErrStorage)
	case found == nil:
		return logstore.TopicInfo{}, fmt.Errorf("topic %q: %w", name, logstore.ErrTopicExists)
	}
	m := metaOf(info)
	if err := s.eachPartition(octx, partitions, func(ctx context.Context, p int32) error {
		cfg := s.streamConfig(m, p)
		if err := sljs.Retry(ctx, func(ctx context.Context) error {
			_, err := s.js.CreateStream(ctx, cfg)
			return err
		}); err != nil {
			return err
		}
		return sljs.WaitLeader(ctx, s.js, cfg.Name)
	}); err != nil {
		s.dropStreams(m.ID, partitions)
		return logstore.TopicInfo{}, sljs.Wrap(ctx, fmt.Sprintf("create the streams of topic %q", name), err, logstore.ErrStorage)
	}
	val, _ := json.Marshal(m)
	rev, err := s.kv.Create(octx, metaKey(name), val)
	if err != nil {
		s.dropStreams(m.ID, partitions)
		if errors.Is(err, njs.ErrKeyExists) {
			return logstore.TopicInfo{}, fmt.Errorf("topic %q: %w", name, logstore.ErrTopicExists)
		}
		return logstore.TopicInfo{}, sljs.Wrap(ctx, fmt.Sprintf("record topic %q", name), err, logstore.ErrStorage)
	}
	t := s.newTopic(m, rev, nil)
	gone, _ := s.topics.Update(name, rev, func(*topic) *topic { return t })
	if gone != nil {
		gone.shutdown(logstore.TopicDeletedError(name))
	}
	return t.info, nil
}

// alterAttempts bounds AlterTopic's retries after a concurrent change of
// the topic's metadata entry by another instance.
const alterAttempts = 10

// AlterTopic implements logstore.Store over the metadata entry: it reads
// the entry as the bucket has it, creates the streams of the partitions
// fn adds, then updates the entry conditionally on the revision read (a
// concurrent change makes it read and call fn again). Streams created for
// an update that then failed stay, empty; the next alteration that adds
// those partitions takes them as they are. Other instances apply the new
// entry through their watch.
func (s *Store) AlterTopic(ctx context.Context, name string, fn func(cur logstore.TopicInfo) (logstore.TopicInfo, error)) (logstore.TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return logstore.TopicInfo{}, err
	}
	if _, err := s.topics.Lookup(name); err != nil {
		return logstore.TopicInfo{}, err
	}
	s.alterMu.Lock()
	defer s.alterMu.Unlock()
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	for attempt := 1; ; attempt++ {
		var e njs.KeyValueEntry
		err := sljs.Retry(octx, func(ctx context.Context) (err error) {
			e, err = s.kv.Get(ctx, metaKey(name))
			return err
		})
		switch {
		case errors.Is(err, njs.ErrKeyNotFound) || errors.Is(err, njs.ErrKeyDeleted):
			return logstore.TopicInfo{}, logstore.TopicDeletedError(name)
		case err != nil:
			return logstore.TopicInfo{}, sljs.Wrap(ctx, fmt.Sprintf("look up topic %q", name), err, logstore.ErrStorage)
		}
		var m topicMeta
		if err := json.Unmarshal(e.Value(), &m); err != nil || m.Name != name {
			return logstore.TopicInfo{}, fmt.Errorf("the metadata entry of topic %q cannot be read (%v): %w", name, err, logstore.ErrCorrupt)
		}
		cur := m.info()
		next, err := fn(cur)
		if err != nil {
			return logstore.TopicInfo{}, err
		}
		if next, err = logstore.ValidateAlter(cur, next); err != nil {
			return logstore.TopicInfo{}, err
		}
		nm := metaOf(next)
		if added := next.Partitions - cur.Partitions; added > 0 {
			if err := s.eachPartition(octx, added, func(ctx context.Context, i int32) error {
				cfg := s.streamConfig(nm, cur.Partitions+i)
				if err := sljs.Retry(ctx, func(ctx context.Context) error {
					_, err := s.js.CreateStream(ctx, cfg) // an existing stream of this config is answered as created
					return err
				}); err != nil {
					return err
				}
				return sljs.WaitLeader(ctx, s.js, cfg.Name)
			}); err != nil {
				return logstore.TopicInfo{}, sljs.Wrap(ctx, fmt.Sprintf("create the new streams of topic %q", name), err, logstore.ErrStorage)
			}
		}
		val, _ := json.Marshal(nm)
		rev, err := s.kv.Update(octx, metaKey(name), val, e.Revision())
		if err != nil {
			if (errors.Is(err, njs.ErrKeyExists) || sljs.IsWrongLastSequence(err)) && attempt < alterAttempts {
				// Changed meanwhile by another instance: read it again,
				// after a pause that spreads the racers out.
				select {
				case <-octx.Done():
				case <-time.After(time.Duration(attempt) * time.Duration(5+rand.IntN(20)) * time.Millisecond):
				}
				continue
			}
			return logstore.TopicInfo{}, sljs.Wrap(ctx, fmt.Sprintf("record the alteration of topic %q", name), err, logstore.ErrStorage)
		}
		s.applyTopic(name, rev, &nm)
		return next, nil
	}
}

func (s *Store) streamConfig(m topicMeta, p int32) njs.StreamConfig {
	return njs.StreamConfig{
		Name:               sljs.StreamName(s.prefix, m.ID, p),
		Description:        fmt.Sprintf("sharelog topic %s partition %d", m.Name, p),
		Subjects:           []string{sljs.Subject(s.prefix, m.ID, p)},
		Storage:            njs.FileStorage,
		Replicas:           s.replicas,
		Retention:          njs.LimitsPolicy,
		Discard:            njs.DiscardOld,
		DenyDelete:         true,
		AllowDirect:        true,
		AllowAtomicPublish: true,
		Metadata: map[string]string{
			"sharelog.topic":     m.Name,
			"sharelog.topic_id":  m.ID,
			"sharelog.partition": strconv.Itoa(int(p)),
			"sharelog.format":    recordFormat,
		},
	}
}

// eachPartition runs fn for partitions 0..n-1, a few at a time, and returns
// the first error.
func (s *Store) eachPartition(ctx context.Context, n int32, fn func(ctx context.Context, p int32) error) error {
	sem := make(chan struct{}, createParallel)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for p := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, p); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("partition %d: %w", p, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// dropStreams deletes the streams of a topic that failed to be created,
// with its own deadline (the caller's may be what failed). A stream it
// cannot delete is left as an orphan (its name carries a topic ID no
// metadata entry has).
func (s *Store) dropStreams(id string, partitions int32) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	_ = s.eachPartition(ctx, partitions, func(ctx context.Context, p int32) error {
		err := s.js.DeleteStream(ctx, sljs.StreamName(s.prefix, id, p))
		if errors.Is(err, njs.ErrStreamNotFound) {
			return nil
		}
		return err
	})
}

// DeleteTopic implements logstore.Store: the metadata entry goes first (a
// delete conditional on the revision this instance knows), then the
// streams. Streams that cannot be deleted are reported in the error; the
// topic is gone either way.
func (s *Store) DeleteTopic(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := s.topics.Lookup(name)
	if err != nil {
		return err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	if err := s.kv.Delete(octx, metaKey(name), njs.LastRevision(t.rev)); err != nil {
		if errors.Is(err, njs.ErrKeyRevisionMismatch) || sljs.IsWrongLastSequence(err) {
			return fmt.Errorf("topic %q changed while it was being deleted, try again: %w", name, logstore.ErrUnknownTopic)
		}
		return sljs.Wrap(ctx, fmt.Sprintf("delete topic %q", name), err, logstore.ErrStorage)
	}
	s.topics.RemoveIf(name, t)
	t.shutdown(logstore.TopicDeletedError(name))
	err = s.eachPartition(octx, t.info.Partitions, func(ctx context.Context, p int32) error {
		err := s.js.DeleteStream(ctx, sljs.StreamName(s.prefix, t.info.ID, p))
		if errors.Is(err, njs.ErrStreamNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("topic %q deleted, but some of its streams remain: %w (%w)", name, err, logstore.ErrStorage)
	}
	return nil
}

// Topics implements logstore.Store from the metadata this instance holds.
func (s *Store) Topics(ctx context.Context) ([]logstore.TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.topics.Infos()
}

// TopicInfo implements logstore.Store.
func (s *Store) TopicInfo(ctx context.Context, name string) (logstore.TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return logstore.TopicInfo{}, err
	}
	t, err := s.topics.Lookup(name)
	if err != nil {
		return logstore.TopicInfo{}, err
	}
	return t.info, nil
}

// Topic implements logstore.Store. Offsets are this instance's view;
// SizeBytes is the stream's stored bytes as JetStream counts them.
func (s *Store) Topic(ctx context.Context, name string) (logstore.TopicInfo, []logstore.PartitionInfo, error) {
	if err := ctx.Err(); err != nil {
		return logstore.TopicInfo{}, nil, err
	}
	t, err := s.topics.Lookup(name)
	if err != nil {
		return logstore.TopicInfo{}, nil, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	parts := make([]logstore.PartitionInfo, len(t.parts))
	for i, p := range t.parts {
		// The stream's state gives the bounds; describing a topic does not
		// start following its partitions (in partitioned mode that would
		// make every instance that answers DescribeTopic read every record
		// of partitions it does not own). A partition this instance follows
		// may know a little more (appends acknowledged here, a purge seen
		// by a read), never less.
		st, err := s.js.Stream(octx, p.stream)
		if err != nil {
			return logstore.TopicInfo{}, nil, p.streamErr(ctx, "describe", err)
		}
		state := st.CachedInfo().State
		ls, hw := int64(max(state.FirstSeq, 1))-1, int64(state.LastSeq)
		if kls, khw, loaded, err := p.knownBounds(); err != nil {
			return logstore.TopicInfo{}, nil, err
		} else if loaded {
			ls, hw = max(ls, kls), max(hw, khw)
		}
		parts[i] = logstore.PartitionInfo{Partition: p.id, LogStartOffset: ls, HighWatermark: hw,
			SizeBytes: int64(state.Bytes), SegmentCount: 1}
	}
	return t.info, parts, nil
}

// Close implements logstore.Store: it stops following the metadata and the
// partitions; the connection stays the caller's. Later calls fail with
// ErrClosed.
func (s *Store) Close() error {
	topics, first := s.topics.Close()
	if !first {
		return nil
	}
	s.stopWatch()
	<-s.watchDone
	for _, t := range topics {
		t.shutdown(logstore.ErrClosed)
	}
	return nil
}
