// Command confluent checks sharelog's Kafka listener with
// confluent-kafka-go (librdkafka, bundled with the module): an idempotent
// producer (enable.idempotence=true) writes records to three partitions,
// each acknowledged at the next offset of its partition; a consumer that
// Subscribes in a consumer group reads every record exactly once and in
// order, commits, and a second consumer of the group resumes after the
// commit and reads only the records produced since. Any mismatch exits 1.
//
//	confluent -broker 127.0.0.1:9092
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/sharelog/sharelog/examples/kafka-go-clients/internal/expect"
)

const (
	topic      = "confluent-check"
	group      = "confluent-check-group"
	partitions = 3
)

func main() {
	broker := flag.String("broker", "127.0.0.1:9092", "the Kafka listener")
	flag.Parse()
	if err := run(*broker); err != nil {
		log.Fatalf("confluent-kafka-go check: FAILED: %v", err)
	}
}

func run(broker string) error {
	v, s := kafka.LibraryVersion()
	log.SetFlags(0)
	log.SetPrefix("confluent-kafka-go: ")
	log.Printf("librdkafka %s (%#x)", s, v)

	if err := createTopic(broker); err != nil {
		return err
	}
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":  broker,
		"enable.idempotence": true, // acks=all, retries, sequence numbers per partition
		"linger.ms":          5,
		"batch.num.messages": 4, // several batches per partition, each with its sequence
	})
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer p.Close()

	first, err := produce(p, "a", 12, 0)
	if err != nil {
		return err
	}
	got, err := consume(broker, "consumer-1", 0)
	if err != nil {
		return err
	}
	if err := expect.Exactly(first, got); err != nil {
		return fmt.Errorf("the first consumer of the group: %w", err)
	}
	log.Printf("ok: Subscribe in group %s consumed the %d idempotently produced records once, in order, and committed", group, len(got))

	second, err := produce(p, "b", 4, 12)
	if err != nil {
		return err
	}
	got, err = consume(broker, "consumer-2", 12)
	if err != nil {
		return err
	}
	if err := expect.Exactly(second, got); err != nil {
		return fmt.Errorf("the group resumed after its commit: %w", err)
	}
	log.Printf("ok: the group resumed after its commit: %d new records, nothing before them", len(got))
	return nil
}

func createTopic(broker string) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": broker})
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}})
	if err != nil {
		return fmt.Errorf("CreateTopics: %w", err)
	}
	if len(res) != 1 || res[0].Error.Code() != kafka.ErrNoError {
		return fmt.Errorf("CreateTopics: %v", res)
	}
	return nil
}

// produce sends perPartition records to each partition, round robin, and
// waits for every delivery report: each partition's records must be
// acknowledged at consecutive offsets from `from` (each partition's end
// before the call), in the order they were sent.
func produce(p *kafka.Producer, tag string, perPartition int, from int64) ([]expect.Record, error) {
	reports := make(chan kafka.Event, partitions*perPartition)
	var sent []expect.Record
	t := topic
	for i := range perPartition {
		for part := range int32(partitions) {
			r := expect.Record{Partition: part, Key: fmt.Sprintf("%s-%d-%d", tag, part, i), Value: fmt.Sprintf("v-%s-%d-%d", tag, part, i)}
			err := p.Produce(&kafka.Message{
				TopicPartition: kafka.TopicPartition{Topic: &t, Partition: part},
				Key:            []byte(r.Key),
				Value:          []byte(r.Value),
			}, reports)
			if err != nil {
				return nil, fmt.Errorf("produce %s: %w", r.Key, err)
			}
			sent = append(sent, r)
		}
	}
	byKey := map[string]int64{}
	timeout := time.After(30 * time.Second)
	for range sent {
		select {
		case e := <-reports:
			m, ok := e.(*kafka.Message)
			if !ok {
				return nil, fmt.Errorf("delivery report: %v", e)
			}
			if m.TopicPartition.Error != nil {
				return nil, fmt.Errorf("delivery of %s: %w", m.Key, m.TopicPartition.Error)
			}
			byKey[string(m.Key)] = int64(m.TopicPartition.Offset)
		case <-timeout:
			return nil, fmt.Errorf("%d of %d delivery reports", len(byKey), len(sent))
		}
	}
	next := map[int32]int64{}
	for part := range int32(partitions) {
		next[part] = from
	}
	for i := range sent {
		r := &sent[i]
		off, ok := byKey[r.Key]
		if !ok {
			return nil, fmt.Errorf("no delivery report for %s", r.Key)
		}
		if off != next[r.Partition] {
			return nil, fmt.Errorf("%s acknowledged at offset %d of partition %d, want %d (records in order, each once)", r.Key, off, r.Partition, next[r.Partition])
		}
		r.Offset = off
		next[r.Partition]++
	}
	// librdkafka raises a fatal error when the idempotence guarantees
	// cannot hold (no producer id, an epoch or sequence refused).
	if err := p.GetFatalError(); err != nil {
		return nil, fmt.Errorf("idempotent producer: fatal error: %w", err)
	}
	return sent, nil
}

// consume Subscribes in the group and reads until every partition is at
// its end; a new group starts at the beginning, an existing one at its
// committed offsets (start, when nothing is consumed from a partition).
// It commits synchronously, requires the committed offsets (as Commit
// reports them and as OffsetFetch reads them back) to be just after the
// last record consumed, then closes, leaving the group.
func consume(broker, name string, start int64) ([]expect.Record, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":     broker,
		"group.id":              group,
		"client.id":             name,
		"auto.offset.reset":     "earliest",
		"enable.auto.commit":    false,
		"enable.partition.eof":  true,
		"session.timeout.ms":    6000,
		"heartbeat.interval.ms": 500,
		"fetch.wait.max.ms":     100,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: consumer: %w", name, err)
	}
	defer c.Close()
	if err := c.Subscribe(topic, nil); err != nil {
		return nil, fmt.Errorf("%s: Subscribe: %w", name, err)
	}
	var got []expect.Record
	atEnd := map[int32]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for len(atEnd) < partitions {
		if time.Now().After(deadline) {
			return got, fmt.Errorf("%s: timed out with %d records, at the end of %d partitions", name, len(got), len(atEnd))
		}
		switch e := c.Poll(100).(type) {
		case nil:
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				return got, fmt.Errorf("%s: %w", name, e.TopicPartition.Error)
			}
			delete(atEnd, e.TopicPartition.Partition)
			got = append(got, expect.Record{Partition: e.TopicPartition.Partition, Offset: int64(e.TopicPartition.Offset), Key: string(e.Key), Value: string(e.Value)})
		case kafka.PartitionEOF:
			atEnd[e.Partition] = true
		case kafka.Error:
			return got, fmt.Errorf("%s: %w", name, e)
		}
	}
	if err := expect.InOrder(name, got); err != nil {
		return got, err
	}
	end := map[int32]int64{}
	for part := range int32(partitions) {
		end[part] = start
	}
	for _, r := range got {
		end[r.Partition] = r.Offset + 1
	}
	committed, err := c.Commit()
	if err != nil {
		return got, fmt.Errorf("%s: Commit: %w", name, err)
	}
	if err := checkOffsets("Commit", committed, end); err != nil {
		return got, fmt.Errorf("%s: %w", name, err)
	}
	var tps []kafka.TopicPartition
	t := topic
	for part := range int32(partitions) {
		tps = append(tps, kafka.TopicPartition{Topic: &t, Partition: part})
	}
	fetched, err := c.Committed(tps, 10000)
	if err != nil {
		return got, fmt.Errorf("%s: Committed: %w", name, err)
	}
	if err := checkOffsets("Committed (OffsetFetch)", fetched, end); err != nil {
		return got, fmt.Errorf("%s: %w", name, err)
	}
	return got, nil
}

func checkOffsets(what string, tps []kafka.TopicPartition, want map[int32]int64) error {
	got := map[int32]int64{}
	for _, tp := range tps {
		if tp.Error != nil {
			return fmt.Errorf("%s: partition %d: %w", what, tp.Partition, tp.Error)
		}
		got[tp.Partition] = int64(tp.Offset)
	}
	for part, off := range want {
		if got[part] != off {
			return fmt.Errorf("%s: offsets %v, want %v", what, got, want)
		}
	}
	return nil
}
