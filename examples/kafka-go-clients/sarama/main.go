// Command sarama checks sharelog's Kafka listener with IBM/sarama (pure
// Go; at its default protocol version, or the one -version names, capped
// per API at what the broker's ApiVersions advertises):
//
//   - an idempotent SyncProducer (Producer.Idempotent, Net.MaxOpenRequests
//     1, acks WaitForAll) writes every batch, each record acknowledged at
//     the next offset of its partition;
//   - a ConsumerGroup of two members on a topic of four partitions: once
//     the group has split the partitions between them (both sessions of
//     one generation, claims disjoint and covering the topic), a batch is
//     produced, and each member consumes exactly its partitions' records;
//     member 2 leaves and member 1 takes its partitions over; every member
//     marks and commits what it consumed, and the committed offsets
//     (OffsetFetch) reach the end of every partition before the group
//     changes;
//   - member 1 leaves too, a batch is produced, and a restarted member
//     resumes at the commits: it reads that batch and nothing before it.
//
// Across the members every record produced is consumed exactly once. Any
// mismatch exits 1.
//
//	sarama -broker 127.0.0.1:9092 [-version 4.1.0]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/sharelog/sharelog/examples/kafka-go-clients/internal/expect"
)

const partitions = 4

var (
	topic   = "sarama-check"
	group   = "sarama-check-group"
	version = sarama.DefaultVersion
)

func main() {
	broker := flag.String("broker", "127.0.0.1:9092", "the Kafka listener")
	v := flag.String("version", "", "the Kafka version sarama assumes (its default when empty; newest: "+sarama.MaxVersion.String()+"); the topic and group names get it as a suffix")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("sarama: ")
	if *v != "" {
		var err error
		if version, err = sarama.ParseKafkaVersion(*v); err != nil {
			log.Fatalf("FAILED: -version: %v", err)
		}
		topic += "-" + *v
		group += "-" + *v
	}
	if err := run(*broker); err != nil {
		log.Fatalf("FAILED: %v", err)
	}
}

func config(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.ClientID = clientID
	c.Version = version
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Group.Session.Timeout = 6 * time.Second
	c.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	c.Consumer.Group.Rebalance.Timeout = 20 * time.Second
	c.Consumer.MaxWaitTime = 200 * time.Millisecond
	c.Consumer.Return.Errors = true
	return c
}

func run(broker string) error {
	brokers := []string{broker}
	acfg := config("sarama-admin")
	admin, err := sarama.NewClusterAdmin(brokers, acfg)
	if err != nil {
		return fmt.Errorf("cluster admin: %w", err)
	}
	defer admin.Close()
	log.Printf("protocol version %s", acfg.Version)
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		return fmt.Errorf("CreateTopic: %w", err)
	}

	pcfg := config("sarama-producer")
	pcfg.Producer.Idempotent = true
	pcfg.Producer.RequiredAcks = sarama.WaitForAll
	pcfg.Net.MaxOpenRequests = 1
	pcfg.Producer.Retry.Max = 5
	pcfg.Producer.Return.Successes = true
	pcfg.Producer.Partitioner = sarama.NewManualPartitioner
	producer, err := sarama.NewSyncProducer(brokers, pcfg)
	if err != nil {
		return fmt.Errorf("idempotent producer: %w", err)
	}
	defer producer.Close()
	var produced []expect.Record
	end := map[int32]int64{}
	produce := func(tag string) ([]expect.Record, error) {
		var msgs []*sarama.ProducerMessage
		for i := range 3 {
			for p := range int32(partitions) {
				msgs = append(msgs, &sarama.ProducerMessage{
					Topic: topic, Partition: p,
					Key:   sarama.StringEncoder(fmt.Sprintf("%s-%d-%d", tag, p, i)),
					Value: sarama.StringEncoder(fmt.Sprintf("v-%s-%d-%d", tag, p, i)),
				})
			}
		}
		if err := producer.SendMessages(msgs); err != nil {
			return nil, fmt.Errorf("idempotent SendMessages %s: %w", tag, err)
		}
		var batch []expect.Record
		for _, m := range msgs {
			if m.Offset != end[m.Partition] {
				return nil, fmt.Errorf("%s acknowledged at offset %d of partition %d, want %d (records in order, each once)", m.Key, m.Offset, m.Partition, end[m.Partition])
			}
			end[m.Partition]++
			k, _ := m.Key.Encode()
			v, _ := m.Value.Encode()
			batch = append(batch, expect.Record{Partition: m.Partition, Offset: m.Offset, Key: string(k), Value: string(v)})
		}
		produced = append(produced, batch...)
		return batch, nil
	}
	var consumed expect.Log
	committedAtEnd := func() error {
		var last map[int32]int64
		err := expect.Eventually(20*time.Second, "the group's commits to reach the end of every partition", func() bool {
			res, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2, 3}})
			if err != nil {
				return false
			}
			last = map[int32]int64{}
			for p := range int32(partitions) {
				if b := res.GetBlock(topic, p); b != nil && b.Err == sarama.ErrNoError {
					last[p] = b.Offset
				}
			}
			return maps.Equal(last, end)
		})
		if err != nil {
			return fmt.Errorf("%w: committed %v, end %v", err, last, end)
		}
		return nil
	}
	// consumedOf returns the records of a batch that who consumed.
	consumedOf := func(who, tag string) []expect.Record {
		var rs []expect.Record
		for _, r := range consumed.Of(who) {
			if len(r.Key) > len(tag) && r.Key[:len(tag)+1] == tag+"-" {
				rs = append(rs, r)
			}
		}
		return rs
	}
	only := func(batch []expect.Record, ps []int32) []expect.Record {
		var rs []expect.Record
		for _, r := range batch {
			if slices.Contains(ps, r.Partition) {
				rs = append(rs, r)
			}
		}
		return rs
	}

	// Two members join; the partitions are split between them.
	m1, err := startMember(brokers, "member-1", &consumed)
	if err != nil {
		return err
	}
	defer m1.close()
	if err := expect.Eventually(20*time.Second, "member 1 to hold every partition", func() bool {
		_, claims := m1.current()
		return len(claims) == partitions
	}); err != nil {
		return err
	}
	m2, err := startMember(brokers, "member-2", &consumed)
	if err != nil {
		return err
	}
	defer m2.close()
	var c1, c2 []int32
	if err := expect.Eventually(30*time.Second, "the rebalance to split the partitions between the two members", func() bool {
		g1, a := m1.current()
		g2, b := m2.current()
		c1, c2 = a, b
		return g1 == g2 && len(a) > 0 && len(b) > 0 && slices.Equal(slices.Sorted(slices.Values(append(slices.Clone(a), b...))), []int32{0, 1, 2, 3})
	}); err != nil {
		return fmt.Errorf("%w (member 1 %v, member 2 %v)", err, c1, c2)
	}
	a, err := produce("a")
	if err != nil {
		return err
	}
	if err := expect.Eventually(30*time.Second, "both members to consume batch a", func() bool { return consumed.Len() == len(a) }); err != nil {
		return err
	}
	if err := expect.Exactly(only(a, c1), consumedOf("member-1", "a")); err != nil {
		return fmt.Errorf("member 1 (partitions %v), batch a: %w", c1, err)
	}
	if err := expect.Exactly(only(a, c2), consumedOf("member-2", "a")); err != nil {
		return fmt.Errorf("member 2 (partitions %v), batch a: %w", c2, err)
	}
	if err := committedAtEnd(); err != nil {
		return err
	}
	log.Printf("ok: ConsumerGroup of two members split the partitions (%v / %v), each consumed its own and committed", c1, c2)

	// Member 2 leaves; member 1 takes its partitions over.
	if err := m2.close(); err != nil {
		return err
	}
	if err := expect.Eventually(30*time.Second, "member 1 to take over every partition", func() bool {
		_, claims := m1.current()
		return len(claims) == partitions
	}); err != nil {
		return err
	}
	b, err := produce("b")
	if err != nil {
		return err
	}
	if err := expect.Eventually(30*time.Second, "member 1 to consume batch b", func() bool { return len(consumedOf("member-1", "b")) == len(b) }); err != nil {
		return err
	}
	if err := committedAtEnd(); err != nil {
		return err
	}
	if err := m1.close(); err != nil {
		return err
	}
	log.Printf("ok: member 2 left, member 1 took over its partitions and consumed batch b")

	// The group restarted resumes at its commits.
	c, err := produce("c")
	if err != nil {
		return err
	}
	m3, err := startMember(brokers, "member-3", &consumed)
	if err != nil {
		return err
	}
	defer m3.close()
	if err := expect.Eventually(30*time.Second, "the restarted member to consume batch c", func() bool { return len(consumed.Of("member-3")) >= len(c) }); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // a record read twice or from before the commits shows up here
	if err := expect.Exactly(c, consumed.Of("member-3")); err != nil {
		return fmt.Errorf("the restarted member: %w", err)
	}
	if err := committedAtEnd(); err != nil {
		return err
	}
	if err := m3.close(); err != nil {
		return err
	}
	log.Printf("ok: the restarted group resumed at its commits: batch c and nothing before it")

	for _, who := range []string{"member-1", "member-2", "member-3"} {
		if err := expect.InOrder(who, consumed.Of(who)); err != nil {
			return err
		}
	}
	if err := expect.Exactly(produced, consumed.All()); err != nil {
		return fmt.Errorf("across the members: %w", err)
	}
	log.Printf("ok: %d records produced idempotently, each consumed exactly once across the members", len(produced))
	return nil
}

// member is one ConsumerGroup with its Consume loop; it records what it
// consumes and marks and commits every record.
type member struct {
	name   string
	group  sarama.ConsumerGroup
	cancel context.CancelFunc
	done   chan error

	mu         sync.Mutex
	generation int32
	claims     []int32 // of the current session; nil between sessions
	closed     bool
	closeErr   error
}

func startMember(brokers []string, name string, consumed *expect.Log) (*member, error) {
	g, err := sarama.NewConsumerGroup(brokers, group, config(name))
	if err != nil {
		return nil, fmt.Errorf("%s: NewConsumerGroup: %w", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, group: g, cancel: cancel, done: make(chan error, 1)}
	go func() {
		for err := range g.Errors() {
			log.Printf("%s: %v", name, err)
		}
	}()
	go func() {
		var err error
		for ctx.Err() == nil {
			if err = g.Consume(ctx, []string{topic}, handler{m, consumed}); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				log.Printf("%s: Consume: %v", name, err)
				time.Sleep(100 * time.Millisecond)
			}
		}
		m.done <- nil
	}()
	return m, nil
}

// current returns the generation and claims of the member's session.
func (m *member) current() (int32, []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.generation, slices.Clone(m.claims)
}

// close ends the Consume loop and closes the group, which leaves it.
func (m *member) close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return m.closeErr
	}
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	<-m.done
	err := m.group.Close()
	if err != nil {
		err = fmt.Errorf("%s: Close: %w", m.name, err)
	}
	m.mu.Lock()
	m.closeErr = err
	m.mu.Unlock()
	return err
}

type handler struct {
	m        *member
	consumed *expect.Log
}

func (h handler) Setup(s sarama.ConsumerGroupSession) error {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	h.m.generation = s.GenerationID()
	h.m.claims = slices.Sorted(slices.Values(s.Claims()[topic]))
	if h.m.claims == nil {
		h.m.claims = []int32{}
	}
	return nil
}

func (h handler) Cleanup(s sarama.ConsumerGroupSession) error {
	h.m.mu.Lock()
	h.m.claims = nil
	h.m.mu.Unlock()
	s.Commit()
	return nil
}

func (h handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for msg := range c.Messages() {
		h.consumed.Add(h.m.name, expect.Record{Partition: msg.Partition, Offset: msg.Offset, Key: string(msg.Key), Value: string(msg.Value)})
		s.MarkMessage(msg, "")
		s.Commit()
	}
	return nil
}
