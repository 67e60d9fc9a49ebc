package kafkawire

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

// newGroupsFixture is a fixture whose listener serves classic consumer
// groups over a coordinator with a memory offsets store.
func newGroupsFixture(t *testing.T) *fixture {
	t.Helper()
	return withGroups(newFixture(t))
}

// withGroups restarts f's listener with a consumer-group coordinator.
func withGroups(f *fixture) *fixture {
	t := f.t
	t.Helper()
	c, err := consumergroup.Open(consumergroup.Options{Store: groupoffsets.NewMem(), Logger: slog.New(slog.DiscardHandler),
		MinSessionTimeout: 100 * time.Millisecond,
		Partitions: func(ctx context.Context, topic string) (int32, error) {
			info, err := f.log.TopicInfo(ctx, topic)
			if err != nil {
				return 0, apierr.New(apierr.UnknownTopicOrPartition, "no topic %q", topic)
			}
			return info.Partitions, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Restart the listener with consumer groups on (the handler table is built at Listen).
	if err := f.l.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := f.l.cfg
	cfg.Groups = c
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

func produce(t *testing.T, cl *kgo.Client, topic string, n int) {
	t.Helper()
	for i := range n {
		if err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Partition: int32(i % 4), Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// A kgo consumer group consumes everything, commits, and a second group
// member run resumes from the commits.
func TestKgoConsumerGroupCommitsAndResumes(t *testing.T) {
	f := newGroupsFixture(t)
	f.createTopic("t", 4)
	produce(t, f.client(kgo.RecordPartitioner(kgo.ManualPartitioner())), "t", 40)

	consume := func(want int) {
		cl := f.client(kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := 0
		ctx := testCtx(t)
		for got < want {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d", got, want)
			}
			fs.EachRecord(func(*kgo.Record) { got++ })
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatal(err)
			}
		}
		cl.Close()
	}
	consume(40)
	adm := f.admin()
	offs, err := adm.FetchOffsets(testCtx(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	offs.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != 40 {
		t.Fatalf("committed offsets sum to %d, want 40", total)
	}
	produce(t, f.client(kgo.RecordPartitioner(kgo.ManualPartitioner())), "t", 8)
	consume(8) // from the commits: only the new ones
}

// ListGroups v0–3 (kafkajs sends v2) is answered, not a closed connection.
func TestListGroupsOldVersions(t *testing.T) {
	f := newGroupsFixture(t)
	cl := f.client()
	for v := int16(0); v <= 5; v++ {
		req := kmsg.NewPtrListGroupsRequest()
		req.SetVersion(v)
		resp, err := req.RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if resp.ErrorCode != 0 {
			t.Fatalf("v%d: %v", v, kerr.ErrorForCode(resp.ErrorCode))
		}
	}
}
