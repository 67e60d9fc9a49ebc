package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// TestReadCommittedReaders: the gRPC and REST Fetch with isolation_level
// READ_COMMITTED and change streams see a Kafka transactional producer's
// committed records only — never an aborted one, nothing at or after the
// last stable offset until its transaction ends — and the transactions'
// markers are offset gaps to every reader (docs/kafka.md "Transactions",
// docs/change-streams.md "Transactions"). A change stream over a range
// holding an aborted transaction is read in order, never as an OSO
// snapshot (whose latest record of a key could be an aborted one), while
// the same stream over a topic without transactions is an OSO snapshot.
func TestReadCommittedReaders(t *testing.T) {
	c := startChild(t, t.TempDir(), "--kafka-addr", "127.0.0.1:0", "--oso-backfill", "enabled")
	addr := c.kafkaAddr(t)
	k := dialKafka(t, addr)
	k.createTopic("t", 1)
	k.createTopic("plain", 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tp, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("readers"), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	defer tp.Close()
	pp, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	defer pp.Close()
	produce := func(cl *kgo.Client, key, value string) int64 {
		t.Helper()
		r, err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(key), Value: []byte(value)}).First()
		require.NoError(t, err)
		return r.Offset
	}
	txn := func(commit bool, kv ...string) {
		t.Helper()
		require.NoError(t, tp.BeginTransaction())
		for i := 0; i < len(kv); i += 2 {
			produce(tp, kv[i], kv[i+1])
		}
		require.NoError(t, tp.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	txn(true, "a", "a0", "b", "a1")
	txn(false, "a", "b0", "b", "b1") // the latest records of a and b, aborted
	produce(pp, "p", "p0")
	// C stays open: its record and the plain one after it wait.
	require.NoError(t, tp.BeginTransaction())
	open := produce(tp, "c", "c0")
	produce(pp, "d", "after")
	for _, v := range []string{"x0", "y0", "x1"} {
		_, err := sharelogv1.NewLogServiceClient(c.conn).Produce(ctx, &sharelogv1.ProduceRequest{Topic: "plain",
			Records: []*sharelogv1.Record{{Key: []byte(v[:1]), Value: []byte(v)}}})
		require.NoError(t, err)
	}

	logc := sharelogv1.NewLogServiceClient(c.conn)
	values := func(recs []*sharelogv1.Record) []string {
		out := make([]string, len(recs))
		for i, r := range recs {
			out[i] = string(r.GetValue())
		}
		return out
	}
	committed := sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	res, err := logc.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", IsolationLevel: committed})
	require.NoError(t, err)
	assert.Equal(t, []string{"a0", "a1", "p0"}, values(res.GetRecords()), "read committed, C open")
	require.NotNil(t, res.LastStableOffset)
	assert.Equal(t, open, res.GetLastStableOffset(), "the last stable offset is C's first record")
	res, err = logc.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a0", "a1", "b0", "b1", "p0", "c0", "after"}, values(res.GetRecords()), "read uncommitted: every record, no marker")
	assert.Nil(t, res.LastStableOffset, "read uncommitted answers no last stable offset")
	_, err = logc.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", IsolationLevel: 7})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "an unknown isolation level: %v", err)

	// REST, through the gateway.
	hr, err := http.Get("http://" + c.httpAddr + "/v1/topics/t/partitions/0/records?offset=0&isolationLevel=ISOLATION_LEVEL_READ_COMMITTED")
	require.NoError(t, err)
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	require.Equal(t, http.StatusOK, hr.StatusCode, "%s", body)
	var rest struct {
		Records []struct {
			Value string `json:"value"`
		} `json:"records"`
		LastStableOffset string `json:"lastStableOffset"`
	}
	require.NoError(t, json.Unmarshal(body, &rest), "%s", body)
	var restValues []string
	for _, r := range rest.Records {
		v, err := base64.StdEncoding.DecodeString(r.Value)
		require.NoError(t, err)
		restValues = append(restValues, string(v))
	}
	assert.Equal(t, []string{"a0", "a1", "p0"}, restValues, "REST read committed: %s", body)
	assert.Equal(t, strconv.FormatInt(open, 10), rest.LastStableOffset, "REST lastStableOffset: %s", body)

	// A long poll at the last stable offset answers when C commits.
	polled := make(chan []string, 1)
	go func() {
		res, err := logc.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Offset: open, MaxWaitMs: 20000, IsolationLevel: committed})
		if err != nil {
			t.Errorf("long poll: %v", err)
		}
		polled <- values(res.GetRecords())
	}()

	// Change streams: t is read in order without b0, b1 and stops before
	// c0; plain is an OSO snapshot.
	streams := sharelogv1.NewChangeStreamServiceClient(c.conn)
	events := func(topic string) (<-chan *sharelogv1.ChangeEvent, context.CancelFunc) {
		sctx, scancel := context.WithCancel(ctx)
		st, err := streams.StreamChanges(sctx, &sharelogv1.StreamChangesRequest{Topic: topic, OsoMode: sharelogv1.OsoMode_OSO_MODE_ON})
		require.NoError(t, err)
		ch := make(chan *sharelogv1.ChangeEvent, 64)
		go func() {
			defer close(ch)
			for {
				m, err := st.Recv()
				if err != nil {
					return
				}
				for _, ev := range m.GetEvents() {
					ch <- ev
				}
			}
		}()
		return ch, scancel
	}
	// next collects mutations until want values came or quiet passes with
	// none, and reports whether an OSO snapshot was seen.
	next := func(ch <-chan *sharelogv1.ChangeEvent, want int, quiet time.Duration) (got []string, oso bool) {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for {
			wait := time.After(quiet)
			if len(got) < want {
				wait = nil
			}
			select {
			case ev, ok := <-ch:
				if !ok {
					return got, oso
				}
				if ev.GetOsoSnapshot() != nil {
					oso = true
				}
				if m := ev.GetMutation(); m != nil {
					got = append(got, string(m.GetValue()))
				}
			case <-wait:
				return got, oso
			case <-deadline:
				t.Fatalf("stream: %q after 15 s, want %d records", got, want)
			}
		}
	}
	plainEvents, stopPlain := events("plain")
	defer stopPlain()
	got, oso := next(plainEvents, 2, 300*time.Millisecond)
	assert.True(t, oso, "a topic without transactions is an OSO snapshot (--oso-backfill enabled)")
	assert.ElementsMatch(t, []string{"x1", "y0"}, got, "OSO: each key's latest record")

	tEvents, stopT := events("t")
	defer stopT()
	got, oso = next(tEvents, 3, 500*time.Millisecond)
	assert.False(t, oso, "a range with an aborted transaction is read in order")
	assert.Equal(t, []string{"a0", "a1", "p0"}, got, "change stream, C open")

	require.NoError(t, tp.EndTransaction(ctx, kgo.TryCommit))
	got, _ = next(tEvents, 2, 300*time.Millisecond)
	assert.Equal(t, []string{"c0", "after"}, got, "change stream, C committed")
	select {
	case got := <-polled:
		assert.Equal(t, []string{"c0", "after"}, got, "the long poll at the last stable offset")
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll at the last stable offset did not answer after the commit")
	}
	res, err = logc.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", IsolationLevel: committed})
	require.NoError(t, err)
	assert.Equal(t, []string{"a0", "a1", "p0", "c0", "after"}, values(res.GetRecords()))
	assert.Equal(t, res.GetHighWatermark(), res.GetLastStableOffset(), "no transaction open: the last stable offset is the high watermark")
}
