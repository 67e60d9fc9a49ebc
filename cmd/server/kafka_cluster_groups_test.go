package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumeFrom consumes want records of topic as a member of group with
// franz-go through seeds, committing after every poll, and returns the
// records by partition and offset; first is the first offset it read of
// each partition.
func consumeFrom(t *testing.T, seeds []string, group, topic string, want int) (got map[[2]int64]string, first map[int32]int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RetryTimeout(60*time.Second), kgo.MetadataMinAge(250*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	got, first = map[[2]int64]string{}, map[int32]int64{}
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %d of %d", len(got), want)
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := first[r.Partition]; !ok {
				first[r.Partition] = r.Offset
			}
			got[[2]int64{int64(r.Partition), r.Offset}] = string(r.Value)
		})
		require.NoError(t, cl.CommitUncommittedOffsets(ctx))
	}
	return got, first
}

// Active-standby: a franz-go consumer group commits at the active
// instance, which is SIGKILLed; FindCoordinator at the new active points
// at it, the committed offsets are there exactly (none went backwards),
// and the group resumes from them: it reads every record after them and
// none before (nothing skipped, nothing read twice).
func TestKafkaActiveStandbyConsumerGroupFailover(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	args := []string{"--group-initial-rebalance-delay", "100ms"}
	a := startKafkaMember(t, js.URL(), prefix, "a", args...)
	a.waitReadyz(t, "cluster: active", 20*time.Second)
	b := startKafkaMember(t, js.URL(), prefix, "b", args...)
	b.waitReadyz(t, "forwarding to a", 15*time.Second)
	seeds := []string{a.kafka, b.kafka}

	createKafkaTopic(t, a.kafka, "cg", 3)
	produceRecords(t, a.kafka, "cg", 3, 60) // values 0..59, 20 per partition
	before, first := consumeFrom(t, seeds, "grp", "cg", 30)
	for p, o := range first {
		assert.Zero(t, o, "partition %d: the group starts at the beginning", p)
	}
	commits := committed(t, a.kafka, "grp")
	total := int64(0)
	for _, o := range commits {
		total += o
	}
	require.GreaterOrEqual(t, total, int64(30), "the polls' records are committed: %v", commits)

	// A standby answers the group's calls NOT_COORDINATOR.
	kb := dialKafka(t, b.kafka)
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Version = 8
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = "grp"
	of.Groups = append(of.Groups, rg)
	require.Equal(t, kerr.NotCoordinator.Code, kb.do(of).(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode)

	a.kill(t)
	b.waitReadyz(t, "cluster: active", leaseTTL+20*time.Second)
	assert.Equal(t, commits, committed(t, b.kafka, "grp"), "the new active has every committed offset")

	produceRecords(t, b.kafka, "cg", 3, 30) // 10 more per partition
	left := int(90 - total)
	after, first := consumeFrom(t, seeds, "grp", "cg", left)
	for p, o := range first {
		assert.Equal(t, commits[p], o, "partition %d resumes at its committed offset", p)
	}
	for k := range after {
		_, dup := before[k]
		assert.False(t, dup && k[1] < commits[int32(k[0])], "record %v read again below the commit", k)
	}
	assert.Len(t, after, left, "every record after the commits, once")
	final := committed(t, b.kafka, "grp")
	for p := range int32(3) {
		assert.Equal(t, int64(30), final[p], "partition %d: committed to its end", p)
	}
}
