package broker

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Limits that protect the server; each is reported with a clear message.
const (
	MaxPartitions     = logstore.MaxPartitions // partitions of one topic
	MaxProduceRecords = 10000                  // records in one Produce call
	MaxFetchRecords   = 10000                  // FetchRequest.MaxRecords
	MaxFetchBytes     = 64 << 20               // FetchRequest.MaxBytes
	MaxWait           = 60 * time.Second       // FetchRequest.MaxWait
	DefaultMaxRecords = 500
	DefaultMaxBytes   = 1 << 20
)

// Config holds the server defaults the log API applies.
type Config struct {
	// SegmentBytes is the default segment size of new topics.
	SegmentBytes int64
	// LongPolls bounds the waiting fetches (shared with share fetches);
	// nil = no bound.
	LongPolls *LongPolls
	// Logger receives storage failures that a per-partition result only
	// summarises; nil = slog.Default().
	Logger *slog.Logger
	// Now is the clock of log append times; nil = time.Now.
	Now func() time.Time
	// Owners and Peers route by partition owner in a cluster whose
	// instances each serve a share of the partitions (route.go); nil
	// Owners = a single node, every partition served here.
	Owners Owners
	Peers  Peers
	// Controller, in such a cluster, is who creates and deletes topics
	// (route.go); nil = this instance.
	Controller Controller
	// PartitionLimit caps the partitions of all topics together
	// (--max-partitions, partitioncap.go); 0 = no cap.
	PartitionLimit int
}

// Log is the log API over a store. It is safe for concurrent use.
type Log struct {
	store logstore.Store
	cfg   Config
	log   *slog.Logger
	now   func() time.Time

	roundRobin sync.Map // topic name → *atomic.Uint32, for keyless records

	subMu sync.RWMutex
	subs  []func(TopicEvent)

	polling atomic.Int64 // calls waiting in LongPoll

	capMu       sync.Mutex // serialises the partition cap's admissions
	capReserved int64      // guarded by capMu: partitions of creates under way
}

// New returns the log API over store.
func New(store logstore.Store, cfg Config) *Log {
	l := &Log{store: store, cfg: cfg, log: cfg.Logger, now: cfg.Now}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.now == nil {
		l.now = time.Now
	}
	return l
}

// --- Topic lifecycle ---------------------------------------------------------

// TopicEventKind says what happened to a topic.
type TopicEventKind int

const (
	TopicCreated TopicEventKind = iota + 1
	TopicDeleted
)

// TopicEvent is a change of a topic's existence. Topic.ID tells two
// incarnations of one name apart.
type TopicEvent struct {
	Kind  TopicEventKind
	Topic logstore.TopicInfo
}

// Subscribe registers fn for every topic created or deleted through this
// Log from now on. fn runs synchronously after the change and before the
// call that made it returns, so state bound to a deleted topic is gone when
// the client hears of the deletion; it must not call back into the Log's
// topic lifecycle.
func (l *Log) Subscribe(fn func(TopicEvent)) {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	l.subs = append(l.subs, fn)
}

func (l *Log) publish(ev TopicEvent) {
	l.subMu.RLock()
	subs := l.subs
	l.subMu.RUnlock()
	for _, fn := range subs {
		fn(ev)
	}
}

// --- Topics ------------------------------------------------------------------

// TopicSettings are a new topic's configuration; nil fields take the
// server defaults (Config.SegmentBytes, keep forever, "delete").
type TopicSettings struct {
	SegmentBytes           *int64
	RetentionMs            *int64
	CleanupPolicy          *string
	DeleteRetentionMs      *int64   // compacted topics: how long tombstones survive (docs/compaction.md)
	MinCleanableDirtyRatio *float64 // compacted topics: when the cleaner takes a partition
}

// Topic is a topic with each partition's bounds and disk use.
type Topic struct {
	Info       logstore.TopicInfo
	Partitions []logstore.PartitionInfo
}

// CreateTopic creates a topic of 1..MaxPartitions partitions and returns
// its description.
// Refusals of its arguments are *TopicError ([Log.ValidateTopic]); a topic
// that would take the server beyond Config.PartitionLimit is refused with
// POLICY_VIOLATION.
// With a Controller that names a peer, the peer creates it (and its
// subscribers hear of it) and its answer is this call's.
func (l *Log) CreateTopic(ctx context.Context, name string, partitions int32, s TopicSettings) (Topic, error) {
	peer, err := l.controller(ctx)
	if err != nil {
		return Topic{}, err
	}
	if peer != "" {
		return l.cfg.Peers.CreateTopic(ctx, peer, name, partitions, s)
	}
	cfg, err := l.ValidateTopic(name, partitions, s)
	if err != nil {
		return Topic{}, err
	}
	release, err := l.reservePartitions(ctx, name, partitions)
	if err != nil {
		return Topic{}, err
	}
	info, err := l.store.CreateTopic(ctx, name, partitions, cfg)
	release()
	if err != nil {
		return Topic{}, err
	}
	l.publish(TopicEvent{Kind: TopicCreated, Topic: info})
	return l.DescribeTopic(ctx, name)
}

// DeleteTopic deletes a topic and its data, then tells the subscribers.
// With a Controller that names a peer, the peer deletes it (and tells its
// subscribers).
func (l *Log) DeleteTopic(ctx context.Context, name string) error {
	_, err := l.RemoveTopic(ctx, name)
	return err
}

// RemoveTopic is DeleteTopic answering the deleted topic's info. When a
// peer deletes it, the info is the topic as this instance's store knew it
// before (the name alone if it did not know it yet).
func (l *Log) RemoveTopic(ctx context.Context, name string) (TopicInfo, error) {
	peer, err := l.controller(ctx)
	if err != nil {
		return TopicInfo{}, err
	}
	if peer != "" {
		info, err := l.store.TopicInfo(ctx, name)
		if err != nil {
			info = TopicInfo{Name: name}
		}
		if err := l.cfg.Peers.DeleteTopic(ctx, peer, name); err != nil {
			return TopicInfo{}, err
		}
		return info, nil
	}
	if name == "" {
		return TopicInfo{}, apierr.Invalid("name is required")
	}
	info, err := l.store.TopicInfo(ctx, name)
	if err != nil {
		return TopicInfo{}, err
	}
	if err := l.store.DeleteTopic(ctx, name); err != nil {
		return TopicInfo{}, err
	}
	l.roundRobin.Delete(name)
	l.publish(TopicEvent{Kind: TopicDeleted, Topic: info})
	return info, nil
}

// ListTopics describes every topic, sorted by name; a topic deleted
// meanwhile is left out.
func (l *Log) ListTopics(ctx context.Context) ([]Topic, error) {
	topics, err := l.store.Topics(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Topic, 0, len(topics))
	for _, t := range topics {
		info, parts, err := l.store.Topic(ctx, t.Name)
		if err != nil {
			continue
		}
		out = append(out, Topic{Info: info, Partitions: parts})
	}
	return out, nil
}

// DescribeTopic describes one topic.
func (l *Log) DescribeTopic(ctx context.Context, name string) (Topic, error) {
	if name == "" {
		return Topic{}, apierr.Invalid("name is required")
	}
	info, parts, err := l.store.Topic(ctx, name)
	if err != nil {
		return Topic{}, err
	}
	return Topic{Info: info, Partitions: parts}, nil
}

// --- Produce -----------------------------------------------------------------

// Produced is the outcome of Produce: record i went to Partitions[i] at
// Offsets[i]; LogAppendTime replaced every zero timestamp.
type Produced struct {
	Partitions    []int32
	Offsets       []int64
	LogAppendTime int64
}

// Produce appends records to topic: all to partition when it is set, else
// each where [Log.Route] sends it. A record's Timestamp 0 means the log
// append time; Offset is ignored. The records of one partition are appended
// atomically and contiguously.
func (l *Log) Produce(ctx context.Context, topic string, partition *int32, records []logstore.Record) (Produced, error) {
	if topic == "" {
		return Produced{}, apierr.Invalid("topic is required")
	}
	n := len(records)
	if n == 0 {
		return Produced{}, apierr.Invalid("records must not be empty")
	}
	if n > MaxProduceRecords {
		return Produced{}, apierr.Invalid("%d records in one call; the limit is %d", n, MaxProduceRecords)
	}
	info, err := l.store.TopicInfo(ctx, topic)
	if err != nil {
		return Produced{}, err
	}
	if partition != nil {
		if err := checkPartition(info, *partition); err != nil {
			return Produced{}, err
		}
	}
	now := l.now().UnixMilli()
	out := Produced{Partitions: make([]int32, n), Offsets: make([]int64, n), LogAppendTime: now}
	byPartition := map[int32][]logstore.Record{}
	for i, r := range records {
		if r.Timestamp < 0 {
			return Produced{}, apierr.Invalid("records[%d].timestamp must not be negative", i)
		}
		var p int32
		if partition != nil {
			p = *partition
		} else {
			p = l.route(info, r.Key)
		}
		out.Partitions[i] = p
		if r.Timestamp == 0 {
			r.Timestamp = now
		}
		r.Offset = 0
		byPartition[p] = append(byPartition[p], r)
	}
	bases, err := l.appendAll(ctx, topic, byPartition)
	if err != nil {
		return Produced{}, err
	}
	for i, p := range out.Partitions {
		out.Offsets[i] = bases[p]
		bases[p]++
	}
	return out, nil
}

// appendAll appends each partition's batch, concurrently when there are several
// so that their fsyncs overlap, and returns each batch's base offset.
func (l *Log) appendAll(ctx context.Context, topic string, batches map[int32][]logstore.Record) (map[int32]int64, error) {
	bases := make(map[int32]int64, len(batches))
	if len(batches) == 1 {
		for p, recs := range batches {
			base, err := l.appendTo(ctx, topic, p, recs)
			if err != nil {
				return nil, err
			}
			bases[p] = base
		}
		return bases, nil
	}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
	)
	for p, recs := range batches {
		wg.Go(func() {
			base, err := l.appendTo(ctx, topic, p, recs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			bases[p] = base
		})
	}
	wg.Wait()
	return bases, firstErr
}

// route picks the partition of a record sent without one: murmur2 of the key
// as Kafka's default partitioner, or round-robin for keyless records.
func (l *Log) route(info logstore.TopicInfo, key []byte) int32 {
	if key != nil {
		return Partition(key, info.Partitions)
	}
	c, _ := l.roundRobin.LoadOrStore(info.Name, new(atomic.Uint32))
	return int32((c.(*atomic.Uint32).Add(1) - 1) % uint32(info.Partitions))
}

// Partition is the partition of n that Kafka's default partitioner picks
// for a non-nil key.
func Partition(key []byte, n int32) int32 {
	return int32(toPositive(murmur2(key)) % uint32(n))
}

// --- Fetch -------------------------------------------------------------------

// FetchRequest reads one partition from Offset on. MaxRecords and MaxBytes
// 0 take the defaults; MaxWait 0 answers at once.
type FetchRequest struct {
	Topic      string
	Partition  int32
	Offset     int64
	MaxRecords int32
	MaxBytes   int32
	MaxWait    time.Duration
}

// Fetched is a fetch's records with the partition's bounds at the read.
type Fetched struct {
	Records        []logstore.Record
	HighWatermark  int64
	LogStartOffset int64
}

// Fetch reads records from an offset within [log start, high watermark]
// ([Log.ReadPartition]). At the high watermark it waits up to MaxWait for
// an append ([Log.LongPoll]).
func (l *Log) Fetch(ctx context.Context, req FetchRequest) (Fetched, error) {
	if res, done, err := l.fetchElsewhere(ctx, req); done {
		return res, err
	}
	maxRecords, maxBytes, wait, err := fetchLimits(req)
	if err != nil {
		return Fetched{}, err
	}
	var res Fetched
	perr := l.LongPoll(ctx, []TopicPartition{{req.Topic, req.Partition}}, wait, func() bool {
		res, err = l.ReadPartition(ctx, req.Topic, req.Partition, req.Offset, maxRecords, maxBytes)
		return err != nil || req.Offset < res.HighWatermark
	})
	switch {
	case err != nil:
		return Fetched{}, err
	case perr != nil:
		return Fetched{}, perr
	}
	return res, nil
}

func fetchLimits(req FetchRequest) (maxRecords, maxBytes int, wait time.Duration, err error) {
	switch {
	case req.Topic == "":
		return 0, 0, 0, apierr.Invalid("topic is required")
	case req.Partition < 0:
		return 0, 0, 0, apierr.Invalid("partition must not be negative, got %d", req.Partition)
	case req.MaxRecords < 0 || req.MaxRecords > MaxFetchRecords:
		return 0, 0, 0, apierr.Invalid("max_records must be between 0 and %d, got %d", MaxFetchRecords, req.MaxRecords)
	case req.MaxBytes < 0 || req.MaxBytes > MaxFetchBytes:
		return 0, 0, 0, apierr.Invalid("max_bytes must be between 0 and %d, got %d", MaxFetchBytes, req.MaxBytes)
	case req.MaxWait < 0 || req.MaxWait > MaxWait:
		return 0, 0, 0, apierr.Invalid("max_wait_ms must be between 0 and %d, got %d", MaxWait.Milliseconds(), req.MaxWait.Milliseconds())
	}
	maxRecords, maxBytes = int(req.MaxRecords), int(req.MaxBytes)
	if maxRecords == 0 {
		maxRecords = DefaultMaxRecords
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxBytes
	}
	return maxRecords, maxBytes, req.MaxWait, nil
}

// --- ListOffsets -------------------------------------------------------------

// OffsetSpec says which offset ListOffsets looks up.
type OffsetSpec int

const (
	Earliest     OffsetSpec = iota + 1 // the log start offset
	Latest                             // the high watermark
	ByTimestamp                        // the first record at or after a timestamp
	MaxTimestamp                       // the record with the largest timestamp
)

// ListOffsets returns an offset of the partition and, for ByTimestamp and
// MaxTimestamp, the timestamp of the record found (-1 otherwise; (-1, -1)
// when no record is at or after ts, or the partition is empty). A
// timestamp lookup never answers below the log start.
func (l *Log) ListOffsets(ctx context.Context, topic string, partition int32, spec OffsetSpec, ts int64) (offset, timestamp int64, err error) {
	if off, rts, done, err := l.listOffsetsElsewhere(ctx, topic, partition, spec, ts); done {
		return off, rts, err
	}
	switch {
	case topic == "":
		return 0, 0, apierr.Invalid("topic is required")
	case partition < 0:
		return 0, 0, apierr.Invalid("partition must not be negative, got %d", partition)
	}
	switch spec {
	case Earliest, Latest:
		logStart, hw, err := l.store.Bounds(topic, partition)
		if err != nil {
			return 0, 0, partitionErr(err, topic, partition)
		}
		if spec == Latest {
			return hw, -1, nil
		}
		return logStart, -1, nil
	case ByTimestamp:
		if ts < 0 {
			return 0, 0, apierr.Invalid("timestamp must not be negative, got %d", ts)
		}
		off, rts, err := l.store.OffsetForTimestamp(ctx, topic, partition, ts)
		if err != nil {
			return 0, 0, partitionErr(err, topic, partition)
		}
		return off, rts, nil
	case MaxTimestamp:
		off, rts, err := l.maxTimestamp(ctx, topic, partition)
		if err != nil {
			return 0, 0, partitionErr(err, topic, partition)
		}
		return off, rts, nil
	}
	return 0, 0, apierr.Invalid("unknown offset spec %d", spec)
}

// --- Errors ------------------------------------------------------------------

func unknownPartition(topic string, partition int32) *apierr.Error {
	return apierr.New(apierr.UnknownTopicOrPartition, "topic %q has no partition %d", topic, partition)
}

func outOfRange(offset, logStart, hw int64) *apierr.Error {
	e := apierr.New(apierr.OffsetOutOfRange,
		"offset %d is outside the readable range [%d, %d] (log start offset, high watermark)", offset, logStart, hw)
	e.Metadata = map[string]string{
		"log_start_offset": strconv.FormatInt(logStart, 10),
		"high_watermark":   strconv.FormatInt(hw, 10),
	}
	return e
}

// checkPartition refuses a partition the topic does not have.
func checkPartition(info TopicInfo, partition int32) error {
	if partition < 0 || partition >= info.Partitions {
		return unknownPartition(info.Name, partition)
	}
	return nil
}

// partitionErr gives an unknown partition a message naming it.
func partitionErr(err error, topic string, partition int32) error {
	if errors.Is(err, logstore.ErrUnknownTopic) {
		return unknownPartition(topic, partition)
	}
	return err
}
