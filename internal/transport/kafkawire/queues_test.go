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
	// poll ends the loop; acks are flushed with the test's ctx, so that a
	// consumer told to stop still knows which of its acks were applied.
	consume := func(ctx, poll context.Context, c *kgo.Client, seed uint64) {
		rnd := rand.New(rand.NewPCG(seed, 1))
		for poll.Err() == nil {
			fs := c.PollFetches(poll)
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
				t.Errorf("flush acks: %v", err) // their outcome is unknown: the count would be wrong
				return
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
	// start runs a consumer; the func it returns stops it: its loop ends
	// (its last acks flushed), then the client closes (its session ends).
	start := func(seed uint64) func() {
		c := f.client(kgo.ShareGroup("g"), kgo.ConsumeTopics("q"))
		poll, cancelPoll := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			consume(ctx, poll, c, seed)
		}()
		return func() {
			cancelPoll()
			<-done
			c.Close()
		}
	}
	var stops []func()
	for i := range 4 {
		stops = append(stops, start(uint64(i)))
	}
	for count() < n/3 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	// One consumer goes away with what it holds and another joins.
	stops[0]()
	stops[0] = start(99)
	for count() < n && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range stops {
		s()
	}
	if len(violations) > 0 {
		t.Fatalf("%d violations, first: %v", len(violations), violations[:min(5, len(violations))])
	}
	if got := count(); got < n {
		t.Fatalf("accepted %d of %d records", got, n)
	}
}
