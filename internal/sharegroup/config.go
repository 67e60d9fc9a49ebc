package sharegroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sharelog/sharelog/apierr"
	respbudget "github.com/sharelog/sharelog/internal/budget"
)

// Options configures a Manager. A zero
// field takes the flag's default.
// Where and how durably share state is kept is the share-state store's
// business (sharestate.Store, given to Open).
type Options struct {
	Logger *slog.Logger // default slog.Default()
	// Server defaults and bounds:
	RecordLockDuration, MinRecordLockDuration, MaxRecordLockDuration time.Duration
	DeliveryCountLimit, PartitionMaxRecordLocks                      int
	SessionTimeout, HeartbeatInterval                                time.Duration
	MaxShareSessions                                                 int
	SessionIdleTimeout                                               time.Duration
	// GroupMaxSize is --share-group-max-size (default 200); it must not
	// exceed MaxShareSessions. Membership uses it.
	GroupMaxSize int
	// Dead-letter topics (docs/dead-letter-topics.md):
	// DLQAutoCreateTopics (--dlq-auto-create-topics) creates a group's
	// missing dead-letter topic (one partition) at its first copy; then a
	// group's dead_letter_topic must start with DLQTopicPrefix
	// (--dlq-topic-prefix, default "dlq.").
	DLQAutoCreateTopics bool
	DLQTopicPrefix      string
	// MaxSessionsPerPrincipal is --max-share-sessions-per-principal (0 = half of MaxShareSessions).
	MaxSessionsPerPrincipal int
	// LongPolls bounds the calls waiting for records at once, shared with
	// the log's fetches (--max-long-polls; the broker's LongPolls): a
	// ShareFetch that would wait while every slot is taken is answered at
	// once, as if its max_wait_ms were 0. Nil = no bound.
	LongPolls LongPolls
	// Transactions gives groups with share.isolation.level read_committed
	// a partition's last stable offset and aborted transactions (the
	// broker's read-committed view). Nil: every partition reads as having
	// no transaction in flight or aborted (no transactional producer can
	// write here), and read_committed delivers what read_uncommitted does.
	Transactions Transactions
	// Budget is the response byte budget ShareFetch draws from, and its
	// --max-fetch-bytes cap (internal/budget); nil = none.
	Budget *respbudget.Bytes

	// Cluster mode, partitioned (owners.go, docs/cluster.md
	// "Share-partitions at their owners"); nil for a single server, which
	// serves every partition and coordinates every group.
	//
	// Owner returns "" when this manager serves the partition's
	// share-partitions, otherwise who does (for error messages). It is
	// asked on every ShareFetch and ShareAcknowledge and must not block.
	Owner func(topic string, partition int32) string
	// Coordinates reports whether this manager coordinates the group
	// (writes its config and epoch); must not block.
	Coordinates func(group string) bool
	// FollowedConfig returns the explicit config of a group coordinated
	// elsewhere, when a follower group is created here; false: unknown
	// (the defaults apply until FollowConfig).
	FollowedConfig func(group string) (GroupConfig, bool)
	// Coordinators and Peers route the calls naming a group to its
	// coordinator, and ask the other instances for the share-partitions
	// they own (route.go); both or neither.
	Coordinators Coordinators
	Peers        Peers

	// DeadLetters appends a group's dead-letter copies. In a partitioned
	// cluster it is the log domain's append, which reaches the dead-letter
	// partition's owner; nil = the log store given to Open.
	DeadLetters Appender

	// DeadLetterAfterAppend, a test hook, runs after the dead-letter worker
	// appended copies and before it archives their records: the point
	// where a crash leaves copies whose records are still ARCHIVING.
	DeadLetterAfterAppend func()

	// dlqManual (tests) keeps the dead-letter worker from starting: the
	// test calls DeadLetterFlush.
	dlqManual bool
}

// LongPolls is a bound of waiting calls (broker.LongPolls satisfies it).
// The slots are shared per client (principal.Name of ctx).
type LongPolls interface {
	TryAcquire(ctx context.Context) bool
	Release(ctx context.Context)
}

// Bounds of group config fields that are not flags.
const (
	minDeliveryLimit    = 2
	maxDeliveryLimit    = 10
	minMaxLocks         = 100
	maxMaxLocks         = 10000
	minSessionTimeoutMs = 1000
	maxSessionTimeoutMs = 3600000
	minHeartbeatMs      = 100
	maxHeartbeatMs      = 600000
	maxGroupIDLen       = 249
	maxMemberIDLen      = 36
	maxTopicLen         = 249
	defaultMaxRecords   = 500
	defaultMaxBytes     = 1 << 20
	defaultGroupMaxSize = 200
	// defaultDLQTopicPrefix is --dlq-topic-prefix's default.
	defaultDLQTopicPrefix = "dlq."
	// The redelivery backoff's bounds and defaults (docs/queues.md).
	maxBackoffInitialMs      = 3600000  // 1 h
	maxBackoffMaxMs          = 86400000 // 1 day
	defaultBackoffMaxMs      = 60000
	defaultBackoffMultiplier = 2.0
	maxBackoffMultiplier     = 10.0
	// Orderings.
	OrderingNone = "none"
	OrderingKey  = "key"
	// Isolation levels (docs/kafka.md "Transactions").
	ReadUncommitted = "read_uncommitted"
	ReadCommitted   = "read_committed"
)

// normalize fills defaults and refuses values outside their bounds (the
// server refuses to start).
func (o *Options) normalize() error {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.RecordLockDuration, 30*time.Second)
	def(&o.MinRecordLockDuration, time.Second)
	def(&o.MaxRecordLockDuration, time.Hour)
	def(&o.SessionTimeout, 45*time.Second)
	def(&o.HeartbeatInterval, 5*time.Second)
	def(&o.SessionIdleTimeout, 2*time.Minute)
	defInt(&o.DeliveryCountLimit, 5)
	defInt(&o.PartitionMaxRecordLocks, 2000)
	defInt(&o.MaxShareSessions, 2000)
	defInt(&o.GroupMaxSize, defaultGroupMaxSize)
	if o.DLQTopicPrefix == "" {
		o.DLQTopicPrefix = defaultDLQTopicPrefix
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.MinRecordLockDuration < time.Millisecond || o.MaxRecordLockDuration > math.MaxInt32*time.Millisecond {
		bad("record lock duration bounds %v..%v must lie within 1ms..%v", o.MinRecordLockDuration, o.MaxRecordLockDuration, math.MaxInt32*time.Millisecond)
	}
	if o.MinRecordLockDuration > o.MaxRecordLockDuration {
		bad("min record lock duration %v exceeds the max %v", o.MinRecordLockDuration, o.MaxRecordLockDuration)
	}
	if o.RecordLockDuration < o.MinRecordLockDuration || o.RecordLockDuration > o.MaxRecordLockDuration {
		bad("record lock duration %v is outside %v..%v", o.RecordLockDuration, o.MinRecordLockDuration, o.MaxRecordLockDuration)
	}
	if o.DeliveryCountLimit < minDeliveryLimit || o.DeliveryCountLimit > maxDeliveryLimit {
		bad("delivery count limit %d is outside %d..%d", o.DeliveryCountLimit, minDeliveryLimit, maxDeliveryLimit)
	}
	if o.PartitionMaxRecordLocks < minMaxLocks || o.PartitionMaxRecordLocks > maxMaxLocks {
		bad("partition max record locks %d is outside %d..%d", o.PartitionMaxRecordLocks, minMaxLocks, maxMaxLocks)
	}
	st, hb := o.SessionTimeout.Milliseconds(), o.HeartbeatInterval.Milliseconds()
	if st < minSessionTimeoutMs || st > maxSessionTimeoutMs {
		bad("session timeout %v is outside 1s..1h", o.SessionTimeout)
	}
	if hb < minHeartbeatMs || hb > maxHeartbeatMs {
		bad("heartbeat interval %v is outside 100ms..10m", o.HeartbeatInterval)
	}
	if st <= hb {
		bad("session timeout %v must exceed the heartbeat interval %v", o.SessionTimeout, o.HeartbeatInterval)
	}
	if o.MaxShareSessions < 1 {
		bad("max share sessions %d must be positive", o.MaxShareSessions)
	}
	if o.SessionIdleTimeout < 0 {
		bad("share session idle timeout %v is negative", o.SessionIdleTimeout)
	}
	if msg := dlqTopicNameProblem(o.DLQTopicPrefix, true); msg != "" {
		bad("dlq topic prefix: %s", msg)
	}
	if o.GroupMaxSize < 1 || o.GroupMaxSize > o.MaxShareSessions {
		bad("share group max size %d must lie within 1..max share sessions (%d)", o.GroupMaxSize, o.MaxShareSessions)
	}
	if (o.Coordinators == nil) != (o.Peers == nil) {
		bad("Coordinators and Peers go together")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sharegroup: invalid options: %w", err)
	}
	return nil
}

// Auto offset reset kinds.
const (
	resetLatest uint8 = iota
	resetEarliest
	resetByDuration
)

type autoReset struct {
	kind uint8
	dur  time.Duration
}

// parseAutoReset parses "latest", "earliest" or "by_duration:<ISO-8601>".
func parseAutoReset(s string) (autoReset, error) {
	switch s {
	case "latest":
		return autoReset{kind: resetLatest}, nil
	case "earliest":
		return autoReset{kind: resetEarliest}, nil
	}
	if d, ok := strings.CutPrefix(s, "by_duration:"); ok {
		dur, err := parseISODuration(d)
		if err != nil {
			return autoReset{}, err
		}
		return autoReset{kind: resetByDuration, dur: dur}, nil
	}
	return autoReset{}, fmt.Errorf("auto_offset_reset %q: must be latest, earliest or by_duration:<ISO-8601 duration>", s)
}

// parseISODuration parses a non-negative ISO-8601 duration in days and
// smaller units: PnDTnHnMnS, every part optional but at least one present,
// a T only before time parts, a fraction only on seconds (PT45M, P3D,
// P1DT6H, PT0.5S). Years, months and weeks are refused: their length is
// not fixed.
func parseISODuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("duration %q: want an ISO-8601 duration in days and smaller units, like P1DT6H or PT45M", s)
	rest, ok := strings.CutPrefix(strings.ToUpper(s), "P")
	if !ok || rest == "" {
		return 0, bad
	}
	var total float64
	inTime, parts := false, 0
	order := "D" // units allowed next, in order
	for rest != "" {
		if rest[0] == 'T' {
			if inTime {
				return 0, bad
			}
			inTime, order, rest = true, "HMS", rest[1:]
			if rest == "" {
				return 0, bad
			}
			continue
		}
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 || i == len(rest) {
			return 0, bad
		}
		num, unit := rest[:i], rest[i]
		rest = rest[i+1:]
		k := strings.IndexByte(order, unit)
		if k < 0 {
			return 0, bad
		}
		order = order[k+1:]
		if strings.Contains(num, ".") && unit != 'S' {
			return 0, bad
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || num[0] == '.' || num[len(num)-1] == '.' {
			return 0, bad
		}
		switch unit {
		case 'D':
			if inTime {
				return 0, bad
			}
			total += v * float64(24*time.Hour)
		case 'H':
			total += v * float64(time.Hour)
		case 'M':
			total += v * float64(time.Minute)
		case 'S':
			total += v * float64(time.Second)
		}
		parts++
	}
	if parts == 0 || total >= math.MaxInt64 {
		return 0, bad
	}
	return time.Duration(total), nil
}

// effConfig is a group's effective configuration, immutable once built;
// operations load it atomically without the group lock.
type effConfig struct {
	lockMs      int32
	lockDur     int64 // ns
	limit       int16
	maxLocks    int64
	reset       autoReset
	resetString string
	sessionMs   int32
	heartbeatMs int32
	deadLetter  string // dead-letter topic; "" = none
	// orderKey: ORDERING_KEY (keyorder.go).
	orderKey bool
	// readCommitted: share.isolation.level read_committed (acquisition.go).
	readCommitted bool
	// The redelivery backoff (backoff): initial 0 = off; ns.
	backoffInit, backoffMax int64
	backoffMult             float64
}

// backoff is how long a record released with delivery count n waits
// before it is acquirable again: min(initial x multiplier^(n-1), max), in
// ns; 0 when the group has no backoff or n < 1 (docs/queues.md).
func (e *effConfig) backoff(n int16) int64 {
	if e.backoffInit <= 0 || n < 1 {
		return 0
	}
	d := float64(e.backoffInit) * math.Pow(e.backoffMult, float64(n-1))
	if d >= float64(e.backoffMax) {
		return e.backoffMax
	}
	return int64(d)
}

// effective merges a group's explicitly set fields with the defaults.
func (o *Options) effective(c *GroupConfig) *effConfig {
	e := &effConfig{
		lockMs:      int32(o.RecordLockDuration.Milliseconds()),
		limit:       int16(o.DeliveryCountLimit),
		maxLocks:    int64(o.PartitionMaxRecordLocks),
		resetString: "latest",
		sessionMs:   int32(o.SessionTimeout.Milliseconds()),
		heartbeatMs: int32(o.HeartbeatInterval.Milliseconds()),
	}
	if c.RecordLockDurationMs != nil {
		e.lockMs = *c.RecordLockDurationMs
	}
	if c.DeliveryCountLimit != nil {
		e.limit = int16(*c.DeliveryCountLimit)
	}
	if c.PartitionMaxRecordLocks != nil {
		e.maxLocks = int64(*c.PartitionMaxRecordLocks)
	}
	if c.AutoOffsetReset != nil {
		if r, err := parseAutoReset(*c.AutoOffsetReset); err == nil {
			e.reset, e.resetString = r, *c.AutoOffsetReset
		}
	}
	if c.SessionTimeoutMs != nil {
		e.sessionMs = *c.SessionTimeoutMs
	}
	if c.HeartbeatIntervalMs != nil {
		e.heartbeatMs = *c.HeartbeatIntervalMs
	}
	if c.DeadLetterTopic != nil {
		e.deadLetter = *c.DeadLetterTopic
	}
	e.orderKey = c.Ordering != nil && *c.Ordering == OrderingKey
	e.readCommitted = c.IsolationLevel != nil && *c.IsolationLevel == ReadCommitted
	initMs, maxMs, mult := int32(0), int32(defaultBackoffMaxMs), defaultBackoffMultiplier
	if c.RedeliveryBackoffInitialMs != nil {
		initMs = *c.RedeliveryBackoffInitialMs
	}
	if c.RedeliveryBackoffMaxMs != nil {
		maxMs = *c.RedeliveryBackoffMaxMs
	}
	if c.RedeliveryBackoffMultiplier != nil {
		mult = *c.RedeliveryBackoffMultiplier
	}
	e.backoffInit, e.backoffMax, e.backoffMult = int64(initMs)*int64(time.Millisecond), int64(maxMs)*int64(time.Millisecond), mult
	e.lockDur = int64(e.lockMs) * int64(time.Millisecond)
	return e
}

// public returns the effective config with every field set.
func (e *effConfig) public() GroupConfig {
	lock, limit, locks := e.lockMs, int32(e.limit), int32(e.maxLocks)
	reset, st, hb, dlq := e.resetString, e.sessionMs, e.heartbeatMs, e.deadLetter
	ord := OrderingNone
	if e.orderKey {
		ord = OrderingKey
	}
	iso := ReadUncommitted
	if e.readCommitted {
		iso = ReadCommitted
	}
	bInit, bMax, bMult := int32(e.backoffInit/int64(time.Millisecond)), int32(e.backoffMax/int64(time.Millisecond)), e.backoffMult
	return GroupConfig{
		Ordering:                    &ord,
		IsolationLevel:              &iso,
		RedeliveryBackoffInitialMs:  &bInit,
		RedeliveryBackoffMaxMs:      &bMax,
		RedeliveryBackoffMultiplier: &bMult,
		DeadLetterTopic:             &dlq,
		RecordLockDurationMs:        &lock,
		DeliveryCountLimit:          &limit,
		PartitionMaxRecordLocks:     &locks,
		AutoOffsetReset:             &reset,
		SessionTimeoutMs:            &st,
		HeartbeatIntervalMs:         &hb,
	}
}

// validateUpdate checks every set field of u against its bounds and the
// timeout/heartbeat relation of the result, before anything applies.
func (o *Options) validateUpdate(cur *effConfig, u *GroupConfig) error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	minLock, maxLock := o.MinRecordLockDuration.Milliseconds(), o.MaxRecordLockDuration.Milliseconds()
	if v := u.RecordLockDurationMs; v != nil && (int64(*v) < minLock || int64(*v) > maxLock) {
		bad("record_lock_duration_ms %d is outside %d..%d", *v, minLock, maxLock)
	}
	if v := u.DeliveryCountLimit; v != nil && (*v < minDeliveryLimit || *v > maxDeliveryLimit) {
		bad("delivery_count_limit %d is outside %d..%d", *v, minDeliveryLimit, maxDeliveryLimit)
	}
	if v := u.PartitionMaxRecordLocks; v != nil && (*v < minMaxLocks || *v > maxMaxLocks) {
		bad("partition_max_record_locks %d is outside %d..%d", *v, minMaxLocks, maxMaxLocks)
	}
	if v := u.AutoOffsetReset; v != nil {
		if _, err := parseAutoReset(*v); err != nil {
			bad("%v", err)
		}
	}
	if v := u.SessionTimeoutMs; v != nil && (*v < minSessionTimeoutMs || *v > maxSessionTimeoutMs) {
		bad("session_timeout_ms %d is outside %d..%d", *v, minSessionTimeoutMs, maxSessionTimeoutMs)
	}
	if v := u.HeartbeatIntervalMs; v != nil && (*v < minHeartbeatMs || *v > maxHeartbeatMs) {
		bad("heartbeat_interval_ms %d is outside %d..%d", *v, minHeartbeatMs, maxHeartbeatMs)
	}
	if v := u.DeadLetterTopic; v != nil && *v != "" {
		if msg := dlqTopicNameProblem(*v, false); msg != "" {
			bad("dead_letter_topic: %s", msg)
		} else if o.DLQAutoCreateTopics && !strings.HasPrefix(*v, o.DLQTopicPrefix) {
			bad("dead_letter_topic %q must start with %q: dead-letter topics are created automatically (--dlq-auto-create-topics), and only with that prefix (--dlq-topic-prefix)", *v, o.DLQTopicPrefix)
		}
	}
	if v := u.Ordering; v != nil && *v != OrderingNone && *v != OrderingKey {
		bad("ordering %q: must be %q or %q", *v, OrderingNone, OrderingKey)
	}
	if v := u.IsolationLevel; v != nil && *v != ReadUncommitted && *v != ReadCommitted {
		bad("isolation_level %q: must be %q or %q", *v, ReadUncommitted, ReadCommitted)
	}
	if v := u.RedeliveryBackoffInitialMs; v != nil && (*v < 0 || *v > maxBackoffInitialMs) {
		bad("redelivery_backoff_initial_ms %d is outside 0..%d", *v, maxBackoffInitialMs)
	}
	if v := u.RedeliveryBackoffMaxMs; v != nil && (*v < 1 || *v > maxBackoffMaxMs) {
		bad("redelivery_backoff_max_ms %d is outside 1..%d", *v, maxBackoffMaxMs)
	}
	if v := u.RedeliveryBackoffMultiplier; v != nil && (math.IsNaN(*v) || *v < 1 || *v > maxBackoffMultiplier) {
		bad("redelivery_backoff_multiplier %v is outside 1..%v", *v, maxBackoffMultiplier)
	}
	if u.SessionTimeoutMs != nil || u.HeartbeatIntervalMs != nil {
		st, hb := cur.sessionMs, cur.heartbeatMs
		if u.SessionTimeoutMs != nil {
			st = *u.SessionTimeoutMs
		}
		if u.HeartbeatIntervalMs != nil {
			hb = *u.HeartbeatIntervalMs
		}
		if st <= hb {
			bad("session_timeout_ms %d must exceed heartbeat_interval_ms %d", st, hb)
		}
	}
	if len(errs) > 0 {
		return &apierr.Error{Reason: apierr.InvalidRequest, Message: "invalid group config: " + strings.Join(errs, "; ")}
	}
	return nil
}

// mergeConfig returns old with the fields set in u replaced (copied).
func mergeConfig(old, u GroupConfig) GroupConfig {
	cp := func(dst **int32, src *int32) {
		if src != nil {
			v := *src
			*dst = &v
		}
	}
	cp(&old.RecordLockDurationMs, u.RecordLockDurationMs)
	cp(&old.DeliveryCountLimit, u.DeliveryCountLimit)
	cp(&old.PartitionMaxRecordLocks, u.PartitionMaxRecordLocks)
	if u.AutoOffsetReset != nil {
		v := *u.AutoOffsetReset
		old.AutoOffsetReset = &v
	}
	cp(&old.SessionTimeoutMs, u.SessionTimeoutMs)
	cp(&old.HeartbeatIntervalMs, u.HeartbeatIntervalMs)
	if u.DeadLetterTopic != nil {
		v := *u.DeadLetterTopic
		old.DeadLetterTopic = &v
	}
	if u.Ordering != nil {
		v := *u.Ordering
		old.Ordering = &v
	}
	if u.IsolationLevel != nil {
		v := *u.IsolationLevel
		old.IsolationLevel = &v
	}
	cp(&old.RedeliveryBackoffInitialMs, u.RedeliveryBackoffInitialMs)
	cp(&old.RedeliveryBackoffMaxMs, u.RedeliveryBackoffMaxMs)
	if u.RedeliveryBackoffMultiplier != nil {
		v := *u.RedeliveryBackoffMultiplier
		old.RedeliveryBackoffMultiplier = &v
	}
	return old
}

// dlqTopicNameProblem says why name cannot be a dead-letter topic (or, with
// prefix, a dead-letter topic prefix), or "" if it can: the topic name
// rules of the log (1..249 characters of [a-zA-Z0-9._-], not "." or "..")
// and, as Kafka's, no "__" at the start (internal topics).
func dlqTopicNameProblem(name string, prefix bool) string {
	switch {
	case name == "":
		return "empty"
	case len(name) > maxTopicLen:
		return fmt.Sprintf("%d characters long, the limit is %d", len(name), maxTopicLen)
	case !prefix && (name == "." || name == ".."):
		return fmt.Sprintf("%q is not a topic name", name)
	case strings.HasPrefix(name, "__"):
		return fmt.Sprintf("%q starts with \"__\", which is reserved for internal topics", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("%q contains %q; allowed are [a-zA-Z0-9._-]", name, c)
		}
	}
	return ""
}
