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
	"github.com/sharelog/sharelog/client/partitioner"
	"github.com/sharelog/sharelog/internal/budget"
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
	// Budget is the response byte budget Fetch draws from, and its
	// --max-fetch-bytes cap (internal/budget); nil = none.
	Budget *budget.Bytes
	// ProducerIDs is where InitProducer reserves producer ids
	// (producerids.go); nil = InitProducer is UNAVAILABLE.
	ProducerIDs ProducerIDBlocks
	// Resync, for a replicated store, re-reads a partition's end as the
	// store's replicas have it (jslog.Store.Resync): an idempotent batch is
	// checked against the log after an append whose outcome was unknown
	// only once the store knows its real end (idempotence.go). nil = the
	// store's own view is its end (file and memory stores).
	Resync func(ctx context.Context, topic string, part int32) error
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

	producers   sync.Map // partitionKey → *producerState (idempotence.go)
	pids        producerIDs
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
	RetentionBytes         *int64   // size retention per partition; -1 (or 0): none
	SegmentMs              *int64   // the age at which the active segment rolls
	MaxMessageBytes        *int64   // the largest batch (Kafka) or record (gRPC, REST)
	CompressionType        *string  // Kafka's compression.type, kept (topicconfig.go)
	MessageTimestampType   *string  // CreateTime or LogAppendTime
	MinInsyncReplicas      *int32   // Kafka's min.insync.replicas, kept (topicconfig.go)
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
	l.forgetProducers(info.ID)
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
// Offsets[i], or, when Errors[i] is set, its partition did not append it
// (Offsets[i] is then -1); LogAppendTime replaced every zero timestamp.
type Produced struct {
	Partitions    []int32
	Offsets       []int64
	Errors        []*apierr.Error // nil when every partition appended
	LogAppendTime int64
}

// Produce appends records to topic: all to partition when it is set, else
// each where [Log.Route] sends it. A record's Timestamp 0 means the log
// append time, and so does every timestamp on a topic whose
// message.timestamp.type is LogAppendTime; a record larger than the
// topic's max.message.bytes (Record.Size) fails the call with
// MESSAGE_TOO_LARGE before anything is appended. Offset is ignored. The records of one partition are appended
// atomically and contiguously.
//
// Each partition succeeds or fails alone (docs/produce.md): the answer
// names, per record, its partition's offset or error. The error is for the
// call as a whole: an invalid request, or every partition failed (then it
// is the first failed record's partition's error), and nothing was
// appended.
func (l *Log) Produce(ctx context.Context, topic string, partition *int32, records []logstore.Record) (Produced, error) {
	return l.produce(ctx, topic, partition, records, nil)
}

// ProduceIdempotent is Produce for an idempotent producer
// (idempotence.go, docs/produce.md): each partition's records are
// numbered from idem.BaseSequence[partition], which must name exactly the
// partitions the records go to; keyless records need partition (a resend
// routed round-robin would go elsewhere). A partition whose batch was
// appended before answers its original offsets.
func (l *Log) ProduceIdempotent(ctx context.Context, topic string, partition *int32, records []logstore.Record, idem Idempotence) (Produced, error) {
	if err := validProducer(idem.ProducerID, idem.ProducerEpoch); err != nil {
		return Produced{}, err
	}
	for p, s := range idem.BaseSequence {
		if s < 0 {
			return Produced{}, apierr.Invalid("base_sequence of partition %d must not be negative, got %d", p, s)
		}
	}
	return l.produce(ctx, topic, partition, records, &idem)
}

func (l *Log) produce(ctx context.Context, topic string, partition *int32, records []logstore.Record, idem *Idempotence) (Produced, error) {
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
	logAppend, maxBytes := LogAppendTime(info.Config), MaxMessageBytes(info.Config)
	for i, r := range records {
		if r.Timestamp < 0 {
			return Produced{}, apierr.Invalid("records[%d].timestamp must not be negative", i)
		}
		if sz := r.Size(); int64(sz) > maxBytes {
			return Produced{}, apierr.New(apierr.MessageTooLarge,
				"records[%d] is %d bytes (key, value and headers), larger than the max.message.bytes of topic %q (%d)", i, sz, topic, maxBytes)
		}
		if logAppend {
			r.Timestamp = 0 // the log append time (message.timestamp.type LogAppendTime)
		}
		var p int32
		switch {
		case partition != nil:
			p = *partition
		case idem != nil && r.Key == nil:
			return Produced{}, apierr.Invalid("records[%d] has no key: an idempotent produce of keyless records needs partition (round-robin would send a resend elsewhere)", i)
		default:
			p = l.route(info, r.Key)
		}
		out.Partitions[i] = p
		if r.Timestamp == 0 {
			r.Timestamp = now
		}
		r.Offset = 0
		r.ProducerID, r.ProducerEpoch, r.Sequence = 0, 0, 0
		if idem != nil {
			base, ok := idem.BaseSequence[p]
			if !ok {
				return Produced{}, apierr.Invalid("base_sequence has no entry for partition %d, which records[%d] goes to", p, i)
			}
			r.ProducerID, r.ProducerEpoch = idem.ProducerID, idem.ProducerEpoch
			r.Sequence = seqAdd(base, int64(len(byPartition[p])))
		}
		byPartition[p] = append(byPartition[p], r)
	}
	if idem != nil {
		for p := range idem.BaseSequence {
			if _, ok := byPartition[p]; !ok {
				return Produced{}, apierr.Invalid("base_sequence names partition %d, which none of the records goes to", p)
			}
		}
	}
	bases, errs := l.appendAll(ctx, topic, byPartition)
	var first error // the first failed record's partition's error
	for i, p := range out.Partitions {
		if err := errs[p]; err != nil {
			if first == nil {
				first = err
			}
			if out.Errors == nil {
				out.Errors = make([]*apierr.Error, n)
			}
			out.Errors[i] = ErrorOf(err)
			out.Offsets[i] = -1
			continue
		}
		out.Offsets[i] = bases[p]
		bases[p]++
	}
	if len(errs) == len(byPartition) {
		return Produced{}, first // nothing appended: the call failed as a whole
	}
	for p, err := range errs {
		if e := ErrorOf(err); e.Reason == apierr.KafkaStorageError || e.Reason == apierr.Internal || e.Reason == apierr.CorruptMessage {
			// The result carries the reason only; the cause goes to the log.
			l.log.ErrorContext(ctx, "produce failed on one partition", "topic", topic, "partition", p, "err", err)
		}
	}
	return out, nil
}

// appendAll appends each partition's batch, concurrently when there are several
// so that their fsyncs overlap, and returns each batch's base offset or
// its error.
func (l *Log) appendAll(ctx context.Context, topic string, batches map[int32][]logstore.Record) (map[int32]int64, map[int32]error) {
	bases := make(map[int32]int64, len(batches))
	errs := map[int32]error{}
	if len(batches) == 1 {
		for p, recs := range batches {
			base, err := l.appendTo(ctx, topic, p, recs)
			if err != nil {
				errs[p] = err
			}
			bases[p] = base
		}
		return bases, errs
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for p, recs := range batches {
		wg.Go(func() {
			base, err := l.appendTo(ctx, topic, p, recs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[p] = err
			}
			bases[p] = base
		})
	}
	wg.Wait()
	return bases, errs
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
func Partition(key []byte, n int32) int32 { return partitioner.ForKey(key, n) }

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
	// ReadCommitted reads committed records only (docs/kafka.md
	// "Transactions"): up to the last stable offset, without the records
	// of aborted transactions (left out as offset gaps, like markers).
	ReadCommitted bool
}

// Fetched is a fetch's records with the partition's bounds at the read.
type Fetched struct {
	Records        []logstore.Record
	HighWatermark  int64
	LogStartOffset int64
	// LastStableOffset is the partition's last stable offset, set by a
	// ReadCommitted fetch only (reading it costs a pass over the records
	// appended since the last read-committed read).
	LastStableOffset int64
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
	maxBytes = l.cfg.Budget.CapFetch(maxBytes)
	var (
		res   Fetched
		grant *budget.Grant
	)
	// The response budget is asked only when there are records to read;
	// a client at its share waits for its other responses to be written
	// (up to BudgetWait, or its own MaxWait if longer), then is refused.
	limit := func() (int, error) {
		g, err := l.cfg.Budget.Reserve(ctx, maxBytes, max(wait, BudgetWait))
		if err != nil {
			return 0, err
		}
		if g.Data == 0 {
			return 0, l.budgetRefusal()
		}
		grant = g
		return g.Data, nil
	}
	perr := l.LongPoll(ctx, []TopicPartition{{req.Topic, req.Partition}}, wait, func() bool {
		if req.ReadCommitted {
			res, err = l.readCommitted(ctx, req.Topic, req.Partition, req.Offset, maxRecords, limit)
		} else {
			res, err = l.readPartition(ctx, req.Topic, req.Partition, req.Offset, maxRecords, limit, false)
		}
		// Only markers (and aborted records) up to the high watermark (or
		// the last stable offset) wait as at it.
		return err != nil || len(res.Records) > 0
	})
	switch {
	case err != nil:
		grant.Release()
		return Fetched{}, err
	case perr != nil:
		grant.Release()
		return Fetched{}, perr
	}
	if grant != nil {
		grant.Settle(recordBytes(res.Records), len(res.Records))
	}
	return res, nil
}

// BudgetWait is the least a fetch waits for the response budget before it
// is refused (docs/operations.md "Budgets").
const BudgetWait = 5 * time.Second

// budgetRefusal is the error of a fetch that got no response bytes within
// its wait: its client holds its share (or all clients the total).
func (l *Log) budgetRefusal() error {
	return &apierr.Error{Reason: apierr.ThrottlingQuotaExceeded,
		Message:  "the response byte budget is in use (this client's share, --max-response-bytes-per-principal, or the server's, --max-response-bytes-in-flight): retry when earlier fetches are read",
		Metadata: l.cfg.Budget.Describe()}
}

// recordBytes is the record data of recs (Record.Size), as the budget
// counts it.
func recordBytes(recs []Record) int {
	n := 0
	for i := range recs {
		n += recs[i].Size()
	}
	return n
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
