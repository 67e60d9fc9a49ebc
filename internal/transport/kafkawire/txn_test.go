package kafkawire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharelog/sharelog/internal/storage/txnstate"
	"github.com/sharelog/sharelog/internal/txn"
)

// withTxn restarts f's listener (with consumer groups) with a transaction
// coordinator over a memory state.
func withTxn(f *fixture) *fixture {
	t := f.t
	t.Helper()
	f = withGroups(f)
	c, err := txn.New(txn.Options{Store: txnstate.NewMem(), Log: f.log, Groups: f.l.cfg.Groups,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.l.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := f.l.cfg
	cfg.Txn = c
	l, err := Listen(cfg, f.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		c.Close()
	})
	f.l, f.addr = l, l.Addr().String()
	return f
}

func consumeAll(t *testing.T, cl *kgo.Client, want int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}

// A transactional producer's committed records are read by a
// read-committed consumer, its aborted ones are not; a read-uncommitted
// consumer reads both; the markers are never records.
func TestKgoTransactionsCommitAndAbort(t *testing.T) {
	f := withTxn(newFixture(t))
	f.createTopic("t", 2)
	ctx := testCtx(t)
	p := f.client(kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("t"))
	for i, commit := range []bool{true, false, true} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range 4 {
			r := &kgo.Record{Partition: int32(j % 2), Value: fmt.Appendf(nil, "%d-%d", i, j)}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce in transaction %d: %v", i, err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction %d: %v", i, err)
		}
	}
	committed := f.client(kgo.ConsumeTopics("t"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := consumeAll(t, committed, 8)
	slices.Sort(got)
	want := []string{"0-0", "0-1", "0-2", "0-3", "2-0", "2-1", "2-2", "2-3"}
	if !slices.Equal(got, want) {
		t.Fatalf("read committed: %v, want %v", got, want)
	}
	all := f.client(kgo.ConsumeTopics("t"), kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if got := consumeAll(t, all, 12); len(got) != 12 {
		t.Fatalf("read uncommitted: %d records %v, want 12", len(got), got)
	}
}

// An open transaction holds read-committed consumers at its first
// offset; a new producer with the same transactional id fences the old
// one and aborts its transaction.
func TestKgoTransactionFencing(t *testing.T) {
	f := withTxn(newFixture(t))
	f.createTopic("t", 1)
	ctx := testCtx(t)
	old := f.client(kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("t"))
	if err := old.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := old.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	lso, err := f.log.LastStableOffset(ctx, "t", 0)
	if err != nil || lso != 0 {
		t.Fatalf("last stable offset %d, %v; want 0 with the transaction open", lso, err)
	}
	fresh := f.client(kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("t"))
	if err := fresh.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := fresh.ProduceSync(ctx, &kgo.Record{Value: []byte("fresh")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := fresh.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	err = old.EndTransaction(ctx, kgo.TryCommit)
	if err == nil {
		t.Fatal("the fenced producer committed")
	}
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Errorf("fenced producer's commit: %v, want PRODUCER_FENCED or INVALID_PRODUCER_EPOCH", err)
	}
	cons := f.client(kgo.ConsumeTopics("t"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if got := consumeAll(t, cons, 1); !slices.Equal(got, []string{"fresh"}) {
		t.Fatalf("read committed: %v, want [fresh]", got)
	}
}
