package kafkawire

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// franz-go's share consumer, unmodified, in a group with share.ordering=key
// (docs/queues.md): four consumers, random RELEASEs, one consumer closed
// midway (its session ends, its records come back) and replaced. For
// every key the ACCEPTed offsets increase and no two records of a key are
// ever held at once.
func TestShareConsumerKeyOrdering(t *testing.T) {
	f := newShareFixture(t)
	f.createTopic("q", 2)
	const keys, n = 20, 400
	p := f.client(kgo.DefaultProduceTopic("q"))
	keyAt := map[int32]map[int64]string{0: {}, 1: {}}
	for i := range n {
		k := fmt.Sprintf("k%d", i%keys)
		r := &kgo.Record{Key: []byte(k), Value: []byte(fmt.Sprint(i))}
		if err := p.ProduceSync(testCtx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		keyAt[r.Partition][r.Offset] = k
	}
	f.setGroupConfig("g", "share.auto.offset.reset", "earliest", "share.ordering", "key")

	type pk struct {
		part int32
		key  string
	}
	var mu sync.Mutex // the checker's, held from what a poll gave to its acks' flush
	held := map[pk]int64{}
	accepted := map[pk]int64{}
	done := map[int32]map[int64]bool{0: {}, 1: {}}
	var violations []string
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(done[0]) + len(done[1])
	}
	consume := func(ctx context.Context, c *kgo.Client, seed uint64) {
		rnd := rand.New(rand.NewPCG(seed, 1))
		for ctx.Err() == nil {
			fs := c.PollFetches(ctx)
			recs := fs.Records()
			if len(recs) == 0 {
				continue
			}
			mu.Lock()
			var acceptedNow []*kgo.Record
			for _, r := range recs {
				k := pk{r.Partition, keyAt[r.Partition][r.Offset]}
				if o, busy := held[k]; busy {
					violations = append(violations, fmt.Sprintf("p%d %s: %d delivered while %d is held", k.part, k.key, r.Offset, o))
				}
				held[k] = r.Offset
			}
			for _, r := range recs {
				delete(held, pk{r.Partition, keyAt[r.Partition][r.Offset]}) // before the server lets go
				if rnd.IntN(10) == 0 {
					r.Ack(kgo.AckRelease)
					continue
				}
				r.Ack(kgo.AckAccept)
				acceptedNow = append(acceptedNow, r)
			}
			if err := c.FlushAcks(ctx); err != nil {
				mu.Unlock()
				continue // closing: these acks may not have been applied
			}
			for _, r := range acceptedNow {
				k := pk{r.Partition, keyAt[r.Partition][r.Offset]}
				if last, ok := accepted[k]; ok && r.Offset <= last {
					violations = append(violations, fmt.Sprintf("p%d %s: accepted %d after %d", k.part, k.key, r.Offset, last))
				}
				accepted[k] = r.Offset
				done[r.Partition][r.Offset] = true
			}
			mu.Unlock()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	start := func(seed uint64) (*kgo.Client, context.CancelFunc) {
		c := f.client(kgo.ShareGroup("g"), kgo.ConsumeTopics("q"))
		cctx, ccancel := context.WithCancel(ctx)
		wg.Go(func() { consume(cctx, c, seed) })
		return c, ccancel
	}
	var stops []func()
	for i := range 4 {
		c, stop := start(uint64(i))
		stops = append(stops, func() { stop(); c.Close() })
	}
	for count() < n/3 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	// One consumer goes away with what it holds (the checker's held
	// entries of its last poll are gone: it flushed or never acked).
	stops[0]()
	c, stop := start(99)
	stops[0] = func() { stop(); c.Close() }
	for count() < n && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range stops {
		s()
	}
	wg.Wait()
	if len(violations) > 0 {
		t.Fatalf("%d violations, first: %v", len(violations), violations[:min(5, len(violations))])
	}
	if got := count(); got < n {
		t.Fatalf("accepted %d of %d records", got, n)
	}
}
