package kafkawire

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/producerids"
)

type fixture struct {
	t     *testing.T
	store logstore.Store
	log   *broker.Log // the log domain over store, which the listener calls
	l     *Listener
	addr  string
}

// newFixture starts a listener on 127.0.0.1:0 over the log domain over a
// memory store.
func newFixture(t *testing.T, mutate ...func(*Config)) *fixture {
	t.Helper()
	store := logstore.NewMem()
	log := broker.New(store, broker.Config{SegmentBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler),
		ProducerIDs: producerids.Open(t.TempDir())})
	cfg := Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	for _, m := range mutate {
		m(&cfg)
	}
	l, err := Listen(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close listener: %v", err)
		}
		store.Close()
	})
	return &fixture{t: t, store: store, log: log, l: l, addr: l.Addr().String()}
}

func (f *fixture) client(opts ...kgo.Opt) *kgo.Client {
	f.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.addr), kgo.MetadataMinAge(50 * time.Millisecond),
		kgo.RetryTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(cl.Close)
	return cl
}

func (f *fixture) admin() *kadm.Client { return kadm.NewClient(f.client()) }

func (f *fixture) createTopic(name string, partitions int32) {
	f.t.Helper()
	if _, err := f.store.CreateTopic(context.Background(), name, partitions,
		logstore.TopicConfig{SegmentBytes: 1 << 20, RetentionMs: -1, CleanupPolicy: logstore.CleanupDelete}); err != nil {
		f.t.Fatal(err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor waits until cond holds, checking every millisecond, or fails.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
