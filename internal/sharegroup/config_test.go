package sharegroup

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// GetShareGroupConfig and UpdateShareGroupConfig.
func TestGroupConfig(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.m.GetConfig(context.Background(), "nope")
	assert.Equal(t, apierr.GroupIDNotFound, reqErr(err).Reason)

	// Update creates the group; unset fields are the defaults.
	c, err := e.m.UpdateConfig(context.Background(), testGroup, GroupConfig{DeliveryCountLimit: i32(7)})
	require.NoError(t, err)
	want := GroupConfig{
		RecordLockDurationMs:    i32(30000),
		DeliveryCountLimit:      i32(7),
		PartitionMaxRecordLocks: i32(2000),
		AutoOffsetReset:         str("latest"),
		SessionTimeoutMs:        i32(45000),
		HeartbeatIntervalMs:     i32(5000),
		DeadLetterTopic:         str(""),
		// docs/queues.md: off by default.
		Ordering:                    str("none"),
		RedeliveryBackoffInitialMs:  i32(0),
		RedeliveryBackoffMaxMs:      i32(60000),
		RedeliveryBackoffMultiplier: f64(2),
		// docs/kafka.md "Transactions": read uncommitted by default, as Kafka.
		IsolationLevel: str("read_uncommitted"),
	}
	assert.Equal(t, want, c)
	got, err := e.m.GetConfig(context.Background(), testGroup)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	for _, tc := range []struct {
		name string
		c    GroupConfig
	}{
		{"lock duration below min", GroupConfig{RecordLockDurationMs: i32(999)}},
		{"lock duration above max", GroupConfig{RecordLockDurationMs: i32(3600001)}},
		{"delivery limit 1", GroupConfig{DeliveryCountLimit: i32(1)}},
		{"delivery limit 11", GroupConfig{DeliveryCountLimit: i32(11)}},
		{"record locks 99", GroupConfig{PartitionMaxRecordLocks: i32(99)}},
		{"record locks 10001", GroupConfig{PartitionMaxRecordLocks: i32(10001)}},
		{"auto reset unknown", GroupConfig{AutoOffsetReset: str("smallest")}},
		{"by_duration months", GroupConfig{AutoOffsetReset: str("by_duration:P1M")}},
		{"by_duration negative", GroupConfig{AutoOffsetReset: str("by_duration:-PT1H")}},
		{"session timeout too small", GroupConfig{SessionTimeoutMs: i32(999)}},
		{"heartbeat too small", GroupConfig{HeartbeatIntervalMs: i32(99)}},
		{"timeout not above heartbeat", GroupConfig{SessionTimeoutMs: i32(5000)}},
		{"heartbeat not below timeout", GroupConfig{HeartbeatIntervalMs: i32(45000)}},
		{"one good, one bad", GroupConfig{RecordLockDurationMs: i32(2000), DeliveryCountLimit: i32(20)}},
		{"dead-letter topic internal", GroupConfig{DeadLetterTopic: str("__dlq")}},
		{"ordering unknown", GroupConfig{Ordering: str("fifo")}},
		{"isolation level unknown", GroupConfig{IsolationLevel: str("serializable")}},
		{"backoff initial negative", GroupConfig{RedeliveryBackoffInitialMs: i32(-1)}},
		{"backoff initial above an hour", GroupConfig{RedeliveryBackoffInitialMs: i32(3600001)}},
		{"backoff max 0", GroupConfig{RedeliveryBackoffMaxMs: i32(0)}},
		{"backoff multiplier below 1", GroupConfig{RedeliveryBackoffMultiplier: f64(0.5)}},
		{"backoff multiplier above 10", GroupConfig{RedeliveryBackoffMultiplier: f64(10.5)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.m.UpdateConfig(context.Background(), testGroup, tc.c)
			re := reqErr(err)
			require.NotNil(t, re, "%v", err)
			assert.Equal(t, apierr.InvalidRequest, re.Reason)
			got, err := e.m.GetConfig(context.Background(), testGroup)
			require.NoError(t, err)
			assert.Equal(t, want, got, "nothing changed")
		})
	}
	c, err = e.m.UpdateConfig(context.Background(), testGroup, GroupConfig{SessionTimeoutMs: i32(2000), HeartbeatIntervalMs: i32(1000), AutoOffsetReset: str("by_duration:P1DT6H")})
	require.NoError(t, err)
	assert.Equal(t, "by_duration:P1DT6H", *c.AutoOffsetReset)
	assert.Equal(t, int32(7), *c.DeliveryCountLimit, "fields not set keep their value")
	_, err = e.m.UpdateConfig(context.Background(), "", GroupConfig{})
	assert.Equal(t, apierr.InvalidRequest, reqErr(err).Reason)
}

func TestParseISODuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"PT45M", 45 * time.Minute, true},
		{"P3D", 72 * time.Hour, true},
		{"P1DT6H", 30 * time.Hour, true},
		{"PT1H30M15S", time.Hour + 30*time.Minute + 15*time.Second, true},
		{"PT0.5S", 500 * time.Millisecond, true},
		{"PT0S", 0, true},
		{"pt2h", 2 * time.Hour, true},
		{"P", 0, false},
		{"PT", 0, false},
		{"P1DT", 0, false},
		{"", 0, false},
		{"1H", 0, false},
		{"P1Y", 0, false},
		{"P1M", 0, false},
		{"P1W", 0, false},
		{"PT1H2H", 0, false},
		{"PT1M1H", 0, false},
		{"P1H", 0, false},
		{"PT1.5H", 0, false},
		{"-PT1H", 0, false},
		{"PT-1H", 0, false},
		{"PT.5S", 0, false},
		{"P1DT1DT", 0, false},
		{"P99999999999999D", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseISODuration(tc.in)
			if !tc.ok {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// The server refuses to start with defaults outside their bounds.
func TestOpenRefusesBadDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*testOpts)
	}{
		{"no dir", func(o *testOpts) { o.Dir = "" }},
		{"lock below min", func(o *testOpts) { o.RecordLockDuration = 500 * time.Millisecond }},
		{"lock above max", func(o *testOpts) { o.RecordLockDuration = 2 * time.Hour }},
		{"min above max", func(o *testOpts) {
			o.MinRecordLockDuration, o.MaxRecordLockDuration, o.RecordLockDuration = time.Minute, time.Second, 30*time.Second
		}},
		{"delivery limit", func(o *testOpts) { o.DeliveryCountLimit = 11 }},
		{"record locks", func(o *testOpts) { o.PartitionMaxRecordLocks = 50 }},
		{"session timeout", func(o *testOpts) { o.SessionTimeout = 2 * time.Hour }},
		{"heartbeat", func(o *testOpts) { o.HeartbeatInterval = time.Millisecond }},
		{"timeout below heartbeat", func(o *testOpts) { o.SessionTimeout, o.HeartbeatInterval = 2*time.Second, 3*time.Second }},
		{"group size above sessions", func(o *testOpts) { o.MaxShareSessions, o.GroupMaxSize = 10, 20 }},
		{"fsync mode", func(o *testOpts) { o.Fsync = logstore.FsyncMode(9) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOpts{Dir: t.TempDir()}
			tc.mut(&o)
			_, err := openWith(logstore.NewMem(), o)
			assert.Error(t, err)
		})
	}
}

// The auto_offset_reset at initialisation; changing it affects only
// uninitialised share-partitions.
func TestAutoOffsetReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 4)
		now := time.Now()
		var recs []logstore.Record
		for _, ago := range []time.Duration{3 * time.Hour, 2 * time.Hour, 50 * time.Minute, 10 * time.Minute} {
			recs = append(recs, logstore.Record{Timestamp: now.Add(-ago).UnixMilli(), Value: []byte("v")})
		}
		for p := range int32(4) {
			_, err := e.store.Append(context.Background(), "t", p, recs)
			require.NoError(t, err)
		}
		_, err := e.store.DeleteRecordsBefore(context.Background(), "t", 1, 1)
		require.NoError(t, err)
		for _, tc := range []struct {
			part  int32
			reset string
			spso  int64
		}{
			{0, "latest", 4},
			{1, "earliest", 1},
			{2, "by_duration:PT1H", 2},
			{3, "by_duration:PT1M", 4},
		} {
			x := tp("t", tc.part)
			e.update(GroupConfig{AutoOffsetReset: str(tc.reset)})
			e.open("m", x)
			assert.Equal(t, tc.spso, e.spso(x), tc.reset)
		}
		// Changing it later does not touch initialised share-partitions.
		e.update(GroupConfig{AutoOffsetReset: str("earliest")})
		e.open("m", tp("t", 0))
		assert.Equal(t, int64(4), e.spso(tp("t", 0)))
	})
}
