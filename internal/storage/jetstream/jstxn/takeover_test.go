package jstxn_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstxn"
	"github.com/sharelog/sharelog/internal/storage/txnstate"
	"github.com/sharelog/sharelog/internal/txn"
)

// termLog is one term's log as the coordinator sees it: the markers it
// wrote, or fail for every marker.
type termLog struct {
	mu      sync.Mutex
	pid     int64
	fail    error
	markers []string
}

func (l *termLog) InitProducer(context.Context) (int64, int16, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pid++
	return l.pid, 0, nil
}

func (l *termLog) WriteTxnMarker(_ context.Context, topic string, part int32, pid int64, epoch int16, commit bool, _ int32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	kind := map[bool]string{true: "commit", false: "abort"}[commit]
	l.markers = append(l.markers, fmt.Sprintf("%s-%d %s pid %d epoch %d", topic, part, kind, pid, epoch))
	return nil
}

type termGroups struct {
	mu        sync.Mutex
	committed map[string][]groupoffsets.Offset
}

func (g *termGroups) CommitTransaction(_ context.Context, group string, offs []groupoffsets.Offset) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.committed == nil {
		g.committed = map[string][]groupoffsets.Offset{}
	}
	g.committed[group] = append(g.committed[group], offs...)
	return nil
}

// A failover of the transaction coordinator over the bucket (the active
// instance of active-standby mode): the old term decided a commit and
// could not write its markers, and left another transaction open. The
// next term's coordinator loads both from the bucket; it completes the
// commit (markers on every partition, the offsets committed) and aborts
// the open one once its timeout passed, with the epoch bumped. The old
// term's coordinator, still running, has its next write refused
// NOT_OWNER (the client's NOT_COORDINATOR), changing nothing.
func TestFailoverCompletesWhatWasInFlight(t *testing.T) {
	open, _ := opener(t)
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)

	oldLog := &termLog{}
	old, err := txn.New(txn.Options{Store: open(jstxn.Options{Epoch: 1}), Log: oldLog, Groups: &termGroups{},
		Now: func() time.Time { return t0 }, CheckInterval: time.Hour})
	require.NoError(t, err)
	defer old.Close()

	pid, epoch, err := old.InitProducer(ctx, "etl", 60000, -1, -1)
	require.NoError(t, err)
	require.NoError(t, old.AddPartitions(ctx, "etl", pid, epoch, []txn.Partition{{Topic: "out", Partition: 0}, {Topic: "out", Partition: 1}}))
	require.NoError(t, old.AddOffsets(ctx, "etl", pid, epoch, "g"))
	require.NoError(t, old.TxnOffsetCommit(ctx, "etl", pid, epoch, "g", []txn.Offset{{Topic: "in", Partition: 0, Offset: 10, LeaderEpoch: -1}}))
	oldLog.mu.Lock()
	oldLog.fail = errors.New("the term ended")
	oldLog.mu.Unlock()
	require.Error(t, old.EndTxn(ctx, "etl", pid, epoch, true), "the decision is durable, its markers are not written")
	d, err := old.Describe("etl")
	require.NoError(t, err)
	require.Equal(t, "PrepareCommit", d.State)

	opid, oepoch, err := old.InitProducer(ctx, "left", 1000, -1, -1)
	require.NoError(t, err)
	require.NoError(t, old.AddPartitions(ctx, "left", opid, oepoch, []txn.Partition{{Topic: "out", Partition: 1}}))

	// The next term, its timeout check a while later.
	newLog, newGroups := &termLog{pid: 10}, &termGroups{}
	cur, err := txn.New(txn.Options{Store: open(jstxn.Options{Epoch: 2}), Log: newLog, Groups: newGroups,
		Now: func() time.Time { return t0.Add(5 * time.Second) }, CheckInterval: time.Hour})
	require.NoError(t, err)
	defer cur.Close()
	d, err = cur.Describe("etl")
	require.NoError(t, err)
	assert.Equal(t, "CompleteCommit", d.State)
	assert.Equal(t, pid, d.ProducerID)
	assert.Equal(t, epoch, d.Epoch, "the producer keeps its id and epoch across the failover")
	l, err := cur.Describe("left")
	require.NoError(t, err)
	assert.Equal(t, "CompleteAbort", l.State)
	assert.Equal(t, oepoch+1, l.Epoch, "the timed-out producer is fenced")
	assert.ElementsMatch(t, []string{"out-0 commit pid 1 epoch 0", "out-1 commit pid 1 epoch 0", "out-1 abort pid 2 epoch 1"}, newLog.markers)
	assert.Equal(t, map[string][]groupoffsets.Offset{"g": {{Topic: "in", Partition: 0, Offset: 10, LeaderEpoch: -1}}}, newGroups.committed)

	// The old term's coordinator is fenced at its next write: NOT_OWNER,
	// nothing written.
	err = old.AddPartitions(ctx, "left", opid, oepoch, []txn.Partition{{Topic: "out", Partition: 0}})
	assert.Equal(t, apierr.NotOwner, broker.ReasonOf(err), "%v", err)

	// The producer goes on at the new term.
	require.NoError(t, cur.AddPartitions(ctx, "etl", pid, epoch, []txn.Partition{{Topic: "out", Partition: 0}}))
	require.NoError(t, cur.EndTxn(ctx, "etl", pid, epoch, true))

	// What the bucket holds is the new term's.
	all, err := open(jstxn.Options{Epoch: 3}).Load()
	require.NoError(t, err)
	require.Len(t, all, 2)
	assert.Equal(t, "etl", all[0].ID)
	assert.Equal(t, txnstate.CompleteCommit, all[0].Status)
	assert.Equal(t, "left", all[1].ID)
	assert.Equal(t, txnstate.CompleteAbort, all[1].Status)
	assert.Empty(t, all[1].Partitions, "the old term's late add changed nothing")
}
