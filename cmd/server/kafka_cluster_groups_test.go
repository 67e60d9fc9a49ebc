package main

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
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

// tryCommitted is the group's committed offsets by partition, or the
// error of the fetch.
func tryCommitted(addr, group string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var ferr error
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			ferr = o.Err
		}
		out[o.Partition] = o.At
	})
	return out, ferr
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

// Partitioned: three instances coordinate six franz-go consumer groups
// between them (a group is taken by the instance its first call reaches);
// the coordinator of some is SIGKILLed; FindCoordinator then names a live
// instance for each, which loaded the group's committed offsets from the
// cluster's KV (none went backwards), and each group resumes exactly
// from them. DeleteGroups at an instance that does not coordinate a
// group answers NOT_COORDINATOR.
func TestKafkaPartitionedConsumerGroupsFailover(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	members := map[string]*kafkaMember{}
	for _, id := range []string{"a", "b", "c"} {
		members[id] = startKafkaMember(t, js.URL(), prefix, id, "--cluster-mode", "partitioned", "--group-initial-rebalance-delay", "100ms")
		members[id].waitReadyz(t, "cluster: partitioned", 15*time.Second)
	}
	all := maps.Clone(members)
	t.Cleanup(func() {
		if t.Failed() {
			for id, m := range all {
				t.Logf("last log lines of %s:\n%s", id, strings.Join(m.logs.Tail(200), "\n"))
			}
		}
	})
	k := dialKafka(t, members["a"].kafka)
	require.Eventually(t, func() bool {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version = 7
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "pg", 3, 1
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = 5000
		c := k.do(req).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
		return c == 0 || c == kerr.TopicAlreadyExists.Code
	}, 15*time.Second, 200*time.Millisecond)
	waitSpread(t, members["a"].child, 3, []string{"a", "b", "c"}, 20*time.Second)
	produceRecords(t, members["a"].kafka, "pg", 3, 60)

	// Each group's first call goes to another instance, so that the
	// groups spread over the three.
	order := []string{"a", "b", "c"}
	groups := []string{"g0", "g1", "g2", "g3", "g4", "g5"}
	commits := map[string]map[int32]int64{}
	for i, g := range groups {
		consumeFrom(t, []string{members[order[i%3]].kafka}, g, "pg", 30)
		commits[g] = committed(t, members[order[i%3]].kafka, g)
	}
	// tryCoordinator is the instance FindCoordinator at names for group,
	// "" while at answers COORDINATOR_NOT_AVAILABLE (it is loading the
	// group: a client retries).
	tryCoordinator := func(at, group string) string {
		ids := brokerIDs(kafkaMetadata(t, members[at].kafka))
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.Version = 4
		fc.CoordinatorKeys = []string{group}
		co := dialKafka(t, members[at].kafka).do(fc).(*kmsg.FindCoordinatorResponse).Coordinators[0]
		if co.ErrorCode == kerr.CoordinatorNotAvailable.Code {
			return ""
		}
		assert.Zero(t, co.ErrorCode, "FindCoordinator %s at %s", group, at)
		for addr, node := range ids {
			if node == co.NodeID {
				for id, m := range members {
					if m.kafka == addr {
						return id
					}
				}
			}
		}
		assert.Failf(t, "FindCoordinator names no member", "group %s at %s: node %d", group, at, co.NodeID)
		return ""
	}
	coordinator := func(at, group string) string {
		var c string
		require.Eventually(t, func() bool {
			c = tryCoordinator(at, group)
			return c != ""
		}, 10*time.Second, 100*time.Millisecond, "FindCoordinator %s at %s", group, at)
		return c
	}
	byMember := map[string][]string{}
	for _, g := range groups {
		// The placement may move a group while the three answer, and a
		// group nobody holds is "here" at each (a call takes it): fetch
		// its offsets, as a client would, until they agree.
		var c string
		require.Eventually(t, func() bool {
			_, _ = tryCommitted(members["a"].kafka, g)
			c = tryCoordinator("a", g)
			return c != "" && c == tryCoordinator("b", g) && c == tryCoordinator("c", g)
		}, 20*time.Second, 100*time.Millisecond, "the instances agree on %s's coordinator", g)
		byMember[c] = append(byMember[c], g)
	}
	require.GreaterOrEqual(t, len(byMember), 2, "the groups spread: %v", byMember)
	// DeleteGroups at an instance that does not coordinate the group:
	// NOT_COORDINATOR (the client finds the coordinator again), not the
	// share groups' GROUP_ID_NOT_FOUND.
	for c, gs := range byMember {
		for id, m := range members {
			if id == c {
				continue
			}
			dg := kmsg.NewPtrDeleteGroupsRequest()
			dg.Version = 2
			dg.Groups = []string{gs[0]}
			code := dialKafka(t, m.kafka).do(dg).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode
			assert.Equal(t, kerr.NotCoordinator.Code, code, "DeleteGroups %s (coordinated by %s) at %s", gs[0], c, id)
		}
	}
	victim := ""
	for id, gs := range byMember {
		if victim == "" || len(gs) > len(byMember[victim]) {
			victim = id
		}
	}
	moved := byMember[victim]
	members[victim].kill(t)
	delete(members, victim)
	var live []string
	var seeds []string
	for id, m := range members {
		live = append(live, id)
		seeds = append(seeds, m.kafka)
	}

	for _, g := range groups {
		total := int64(0)
		for _, o := range commits[g] {
			total += o
		}
		var got map[int32]int64
		require.Eventually(t, func() bool {
			// Until the victim's leases expire FindCoordinator may name
			// it, and the fetch fails to dial: a client retries.
			var err error
			got, err = tryCommitted(members[live[0]].kafka, g)
			return err == nil && len(got) == len(commits[g])
		}, leaseTTL+30*time.Second, 200*time.Millisecond, "group %s's offsets are served again", g)
		assert.Equal(t, commits[g], got, "group %s (moved: %v): every committed offset", g, moved)
		after, first := consumeFrom(t, seeds, g, "pg", int(60-total))
		for p, o := range first {
			assert.Equal(t, commits[g][p], o, "group %s partition %d resumes at its committed offset", g, p)
		}
		assert.Len(t, after, int(60-total), "group %s: every record after the commits, once", g)
		c := coordinator(live[0], g)
		assert.NotEqual(t, victim, c)
	}
}
