package kafkawire

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

// logTxns is the broker's read-committed view as the share-group manager
// takes it (the server's is internal/app's shareTxns).
type logTxns struct{ log *broker.Log }

func (t logTxns) ReadCommitted(ctx context.Context, topic string, part int32, from, to int64) (int64, []sharegroup.AbortedTxn, error) {
	v, err := t.log.ReadCommittedView(ctx, topic, part, from, to)
	if err != nil {
		return 0, nil, err
	}
	var out []sharegroup.AbortedTxn
	for _, a := range v.Aborted {
		out = append(out, sharegroup.AbortedTxn{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset, MarkerOffset: a.LastOffset})
	}
	return v.LastStable, out, nil
}

// shareValues polls c until it has want records or quiet passes without
// one, ACCEPTing each, and returns their values in offset order.
func shareValues(t *testing.T, c *kgo.Client, want int, quiet time.Duration) []string {
	t.Helper()
	var got []*kgo.Record
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		wait := time.Until(deadline)
		if len(got) >= want {
			wait = quiet
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		fs := c.PollFetches(ctx)
		cancel()
		rs := fs.Records()
		for _, r := range rs {
			r.Ack(kgo.AckAccept)
		}
		got = append(got, rs...)
		if len(rs) == 0 && len(got) >= want {
			break
		}
	}
	if err := c.FlushAcks(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b *kgo.Record) int { return int(a.Offset - b.Offset) })
	out := make([]string, len(got))
	for i, r := range got {
		out[i] = string(r.Value)
	}
	return out
}

// A share group with share.isolation.level=read_committed never delivers
// an aborted transaction's record, nor one past the last stable offset
// until its transaction commits; read_uncommitted delivers them all; no
// group ever delivers a transaction marker (docs/kafka.md "Transactions").
func TestShareGroupReadCommitted(t *testing.T) {
	f := withTxn(newFixture(t))
	f = withShare(f, logTxns{f.log})
	f.createTopic("q", 1)
	ctx := testCtx(t)
	tp := f.client(kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("q"))
	plain := f.client(kgo.DefaultProduceTopic("q"))
	txn := func(commit bool, values ...string) {
		t.Helper()
		if err := tp.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			if err := tp.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tp.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	txn(true, "a0", "a1", "a2")
	txn(false, "b0", "b1", "b2")
	if err := plain.ProduceSync(ctx, &kgo.Record{Value: []byte("plain")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn(true, "c0", "c1")
	// D stays open: its record and everything after it wait.
	if err := tp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tp.ProduceSync(ctx, &kgo.Record{Value: []byte("d0")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := plain.ProduceSync(ctx, &kgo.Record{Value: []byte("after-d")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	f.setGroupConfig("rc", "share.auto.offset.reset", "earliest", "share.isolation.level", "read_committed")
	f.setGroupConfig("ru", "share.auto.offset.reset", "earliest")
	rc := f.client(kgo.ShareGroup("rc"), kgo.ConsumeTopics("q"), kgo.FetchMaxWait(100*time.Millisecond))
	want := []string{"a0", "a1", "a2", "plain", "c0", "c1"}
	if got := shareValues(t, rc, len(want), 500*time.Millisecond); !slices.Equal(got, want) {
		t.Fatalf("read committed, D open: %q, want %q", got, want)
	}
	ru := f.client(kgo.ShareGroup("ru"), kgo.ConsumeTopics("q"), kgo.FetchMaxWait(100*time.Millisecond))
	all := []string{"a0", "a1", "a2", "b0", "b1", "b2", "plain", "c0", "c1", "d0", "after-d"}
	if got := shareValues(t, ru, len(all), 500*time.Millisecond); !slices.Equal(got, all) {
		t.Fatalf("read uncommitted: %q, want %q (no markers)", got, all)
	}

	if err := tp.EndTransaction(ctx, kgo.TransactionEndTry(true)); err != nil {
		t.Fatal(err)
	}
	want = []string{"d0", "after-d"}
	if got := shareValues(t, rc, len(want), 500*time.Millisecond); !slices.Equal(got, want) {
		t.Fatalf("read committed, D committed: %q, want %q", got, want)
	}
}
