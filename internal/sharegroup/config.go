package sharegroup

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sharelog/sharelog/internal/logstore"
)

// Options configures a Manager (api.md §8, share-groups.md §9). A zero
// field takes the flag's default.
type Options struct {
	Dir           string             // state directory (<data-dir>/sharegroups); required
	Fsync         logstore.FsyncMode // as the log: always = durable before the response
	FsyncInterval time.Duration      // FsyncInterval period; default 1s
	Logger        *slog.Logger       // default slog.Default()
	// Server defaults and bounds (api.md §8, share-groups.md §9):
	RecordLockDuration, MinRecordLockDuration, MaxRecordLockDuration time.Duration
	DeliveryCountLimit, PartitionMaxRecordLocks                      int
	SessionTimeout, HeartbeatInterval                                time.Duration
	MaxShareSessions                                                 int
	SessionIdleTimeout                                               time.Duration
	// GroupMaxSize is --share-group-max-size (default 200); it must not
	// exceed MaxShareSessions. Membership (§8) uses it.
	GroupMaxSize int
	// MaxSessionsPerPrincipal is --max-share-sessions-per-principal (0 = half of MaxShareSessions).
	MaxSessionsPerPrincipal int
	// CompactBytes: the state log is compacted once its newest file exceeds
	// max(CompactBytes, 4 × the last snapshot). Default 16 MiB.
	CompactBytes int64

	testHooks *ioHooks // fault injection for the state log (tests)
}

// Bounds of group config fields that are not flags (§9).
const (
	minDeliveryLimit     = 2
	maxDeliveryLimit     = 10
	minMaxLocks          = 100
	maxMaxLocks          = 10000
	minSessionTimeoutMs  = 1000
	maxSessionTimeoutMs  = 3600000
	minHeartbeatMs       = 100
	maxHeartbeatMs       = 600000
	maxGroupIDLen        = 249
	maxMemberIDLen       = 36
	maxTopicLen          = 249
	defaultMaxRecords    = 500
	defaultMaxBytes      = 1 << 20
	defaultGroupMaxSize  = 200
	defaultCompactBytes  = 16 << 20
	defaultFsyncInterval = time.Second
)

// normalize fills defaults and refuses values outside their bounds (the
// server refuses to start, §9).
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
	def(&o.FsyncInterval, defaultFsyncInterval)
	defInt(&o.DeliveryCountLimit, 5)
	defInt(&o.PartitionMaxRecordLocks, 2000)
	defInt(&o.MaxShareSessions, 2000)
	defInt(&o.GroupMaxSize, defaultGroupMaxSize)
	if o.CompactBytes <= 0 {
		o.CompactBytes = defaultCompactBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.Dir == "" {
		bad("state directory not set")
	}
	if o.Fsync < logstore.FsyncAlways || o.Fsync > logstore.FsyncNever {
		bad("fsync mode %d", o.Fsync)
	}
	if o.FsyncInterval < 0 {
		bad("fsync interval %v is negative", o.FsyncInterval)
	}
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
	if o.GroupMaxSize < 1 || o.GroupMaxSize > o.MaxShareSessions {
		bad("share group max size %d must lie within 1..max share sessions (%d)", o.GroupMaxSize, o.MaxShareSessions)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sharegroup: invalid options: %w", err)
	}
	return nil
}

// Auto offset reset kinds (§6.2).
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
	e.lockDur = int64(e.lockMs) * int64(time.Millisecond)
	return e
}

// public returns the effective config with every field set.
func (e *effConfig) public() GroupConfig {
	lock, limit, locks := e.lockMs, int32(e.limit), int32(e.maxLocks)
	reset, st, hb := e.resetString, e.sessionMs, e.heartbeatMs
	return GroupConfig{
		RecordLockDurationMs:    &lock,
		DeliveryCountLimit:      &limit,
		PartitionMaxRecordLocks: &locks,
		AutoOffsetReset:         &reset,
		SessionTimeoutMs:        &st,
		HeartbeatIntervalMs:     &hb,
	}
}

// validateUpdate checks every set field of u against its bounds and the
// timeout/heartbeat relation of the result, before anything applies (§9).
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
		return &Error{Reason: ReasonInvalidRequest, Message: "invalid group config: " + strings.Join(errs, "; ")}
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
	return old
}
