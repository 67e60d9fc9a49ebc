package main

// The DCP listener in cluster mode (docs/dcp.md "Cluster mode"):
// gocbcore v10's DCPAgent, unmodified, against child instances over
// JetStream. The agent reads the bucket config (every live instance's
// DCP address, each vBucket on its partition's owner), connects to every
// node it needs and streams each vBucket from its owner; when a partition
// moves (SIGTERM of its owner, a failover) the stream ends and the
// client resumes at the new owner with the seqno it holds and the same
// vbuuid, as a DCP client does.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/couchbase/gocbcore/v10"
	"github.com/couchbase/gocbcore/v10/memd"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// dcpAddrOf is the child's bound DCP address (its startup log).
func dcpAddrOf(t *testing.T, c *child) string {
	t.Helper()
	for _, l := range c.startup {
		if l["msg"] == "sharelog serving" {
			if a, _ := l["dcp_addr"].(string); a != "" {
				return a
			}
		}
	}
	t.Fatalf("no dcp_addr in the startup log: %v", c.startup)
	return ""
}

// dcpNotMyVBucket sends a raw DCP stream request for vb of topic to addr
// (no HELLO features: the answer's body is the config as it is) and
// returns the answer's status and the bucket config in its body.
func dcpNotMyVBucket(t *testing.T, addr, topic string, vb uint16) (memd.StatusCode, map[string]any) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	c := memd.NewConn(nc)
	call := func(p *memd.Packet) *memd.Packet {
		p.Magic = memd.CmdMagicReq
		require.NoError(t, c.WritePacket(p))
		resp, _, err := c.ReadPacket()
		require.NoError(t, err)
		return resp
	}
	require.Equal(t, memd.StatusSuccess, call(&memd.Packet{Command: memd.CmdSelectBucket, Key: []byte(topic)}).Status)
	open := make([]byte, 8)
	binary.BigEndian.PutUint32(open[4:], uint32(memd.DcpOpenFlagProducer))
	require.Equal(t, memd.StatusSuccess, call(&memd.Packet{Command: memd.CmdDcpOpenConnection, Key: []byte("raw"), Extras: open}).Status)
	req := make([]byte, 48)
	binary.BigEndian.PutUint64(req[16:], math.MaxUint64)
	resp := call(&memd.Packet{Command: memd.CmdDcpStreamReq, Vbucket: vb, Extras: req, Opaque: 7})
	var cfg map[string]any
	if len(resp.Value) > 0 {
		require.NoError(t, json.Unmarshal(resp.Value, &cfg), "the body: %q", resp.Value)
	}
	return resp.Status, cfg
}

// dcpFollower streams every vBucket of a topic through one DCPAgent and
// resumes a stream that ends (or fails to open) from the last seqno it
// received, with the vbuuid of the failover log, until stop.
type dcpFollower struct {
	agent  *gocbcore.DCPAgent
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	last     map[uint16]uint64   // the greatest seqno received per vBucket
	keys     map[uint16][]string // the keys received, in order
	vbuuid   map[uint16]gocbcore.VbUUID
	dups     []string // mutations at or below a seqno already held, and rollbacks
	ends     map[string]int
	resumes  int
	openErrs map[string]int
}

func newDCPFollower(t *testing.T, topic string, seeds ...string) *dcpFollower {
	t.Helper()
	cfg := &gocbcore.DCPAgentConfig{
		UserAgent:          "sharelog-cluster-test",
		BucketName:         topic,
		SeedConfig:         gocbcore.SeedConfig{MemdAddrs: seeds},
		SecurityConfig:     gocbcore.SecurityConfig{Auth: gocbcore.PasswordAuthProvider{}}, // no authentication here
		EnableCCCPPoller:   true,
		ConfigPollerConfig: gocbcore.ConfigPollerConfig{CccpPollPeriod: 500 * time.Millisecond, CccpMaxWait: 2 * time.Second},
		KVConfig:           gocbcore.KVConfig{ConnectTimeout: 2 * time.Second},
		DCPConfig:          gocbcore.DCPConfig{BufferSize: 1 << 20},
	}
	agent, err := gocbcore.CreateDcpAgent(cfg, "sharelog-cluster-test", memd.DcpOpenFlagProducer)
	require.NoError(t, err)
	ready := make(chan error, 1)
	_, err = agent.WaitUntilReady(time.Now().Add(15*time.Second), gocbcore.WaitUntilReadyOptions{},
		func(_ *gocbcore.WaitUntilReadyResult, err error) { ready <- err })
	require.NoError(t, err)
	require.NoError(t, <-ready)
	f := &dcpFollower{agent: agent, last: map[uint16]uint64{}, keys: map[uint16][]string{},
		vbuuid: map[uint16]gocbcore.VbUUID{}, ends: map[string]int{}, openErrs: map[string]int{}}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() {
		f.cancel()
		_ = agent.Close()
	})
	return f
}

// open starts streaming vb from the seqno held (0 at first), retrying
// until the stream is open or the follower stops.
func (f *dcpFollower) open(vb uint16) {
	for f.ctx.Err() == nil {
		f.mu.Lock()
		start, uuid := f.last[vb], f.vbuuid[vb]
		f.mu.Unlock()
		done := make(chan error, 1)
		op, err := f.agent.OpenStream(vb, 0, uuid, gocbcore.SeqNo(start), math.MaxUint64, gocbcore.SeqNo(start), gocbcore.SeqNo(start),
			f, gocbcore.OpenStreamOptions{}, func(fl []gocbcore.FailoverEntry, err error) {
				if err == nil && len(fl) > 0 {
					f.mu.Lock()
					f.vbuuid[vb] = fl[0].VbUUID
					f.mu.Unlock()
				}
				done <- err
			})
		if err == nil {
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				op.Cancel() // stuck on a node that went away: ask again
				err = <-done
			case <-f.ctx.Done():
				op.Cancel()
				return
			}
		}
		if err == nil {
			return
		}
		var rb gocbcore.DCPRollbackError
		f.mu.Lock()
		if errors.As(err, &rb) {
			// Never with the topic's own vbuuid: a failure of the test.
			f.dups = append(f.dups, fmt.Sprintf("vb %d: rollback from seqno %d: %v", vb, start, err))
		}
		f.openErrs[errName(err)]++
		f.mu.Unlock()
		select {
		case <-f.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func errName(err error) string {
	for _, e := range []error{gocbcore.ErrNotMyVBucket, gocbcore.ErrTemporaryFailure, gocbcore.ErrRequestCanceled, gocbcore.ErrTimeout,
		gocbcore.ErrSocketClosed, gocbcore.ErrDCPStreamStateChanged, gocbcore.ErrDCPStreamDisconnected} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return err.Error()
}

// received is the number of mutations vb got so far.
func (f *dcpFollower) received(vb uint16) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keys[vb])
}

func (f *dcpFollower) SnapshotMarker(gocbcore.DcpSnapshotMarker) {}
func (f *dcpFollower) Mutation(m gocbcore.DcpMutation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.SeqNo <= f.last[m.VbID] {
		f.dups = append(f.dups, fmt.Sprintf("vb %d: %s@%d after %d", m.VbID, m.Key, m.SeqNo, f.last[m.VbID]))
		return
	}
	f.last[m.VbID] = m.SeqNo
	f.keys[m.VbID] = append(f.keys[m.VbID], fmt.Sprintf("%s@%d", m.Key, m.SeqNo))
}
func (f *dcpFollower) Deletion(d gocbcore.DcpDeletion) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dups = append(f.dups, fmt.Sprintf("vb %d: unexpected deletion %s@%d", d.VbID, d.Key, d.SeqNo))
}
func (f *dcpFollower) Expiration(gocbcore.DcpExpiration)                   {}
func (f *dcpFollower) CreateCollection(gocbcore.DcpCollectionCreation)     {}
func (f *dcpFollower) DeleteCollection(gocbcore.DcpCollectionDeletion)     {}
func (f *dcpFollower) FlushCollection(gocbcore.DcpCollectionFlush)         {}
func (f *dcpFollower) CreateScope(gocbcore.DcpScopeCreation)               {}
func (f *dcpFollower) DeleteScope(gocbcore.DcpScopeDeletion)               {}
func (f *dcpFollower) ModifyCollection(gocbcore.DcpCollectionModification) {}
func (f *dcpFollower) OSOSnapshot(gocbcore.DcpOSOSnapshot)                 {}
func (f *dcpFollower) SeqNoAdvanced(gocbcore.DcpSeqNoAdvanced)             {}
func (f *dcpFollower) End(e gocbcore.DcpStreamEnd, err error) {
	if f.ctx.Err() != nil {
		return
	}
	f.mu.Lock()
	f.ends[errName(err)]++
	f.resumes++
	f.mu.Unlock()
	go f.open(e.VbID) // resume where it stopped, wherever the vBucket is now
}

// produceKeys appends n records with keys key-<first..first+n-1> to the
// partition through conn, one at a time, retrying what the cluster
// answers retryably (a partition moving). It returns the keys acked.
func produceKeys(t *testing.T, conn grpc.ClientConnInterface, topic string, part int32, first, n int) []string {
	t.Helper()
	client := sharelogv1.NewLogServiceClient(conn)
	var acked []string
	for i := first; i < first+n; i++ {
		key := fmt.Sprintf("p%d-%d", part, i)
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := client.Produce(ctx, &sharelogv1.ProduceRequest{Topic: topic, Partition: &part,
				Records: []*sharelogv1.Record{{Key: []byte(key), Value: []byte("v")}}})
			cancel()
			if err == nil {
				acked = append(acked, key)
				break
			}
			require.True(t, retryable(err) && time.Now().Before(deadline), "produce %s: %v", key, err)
			time.Sleep(50 * time.Millisecond)
		}
	}
	return acked
}

// logKeys is the partition's log as key@seqno, read through conn.
func logKeys(t *testing.T, conn grpc.ClientConnInterface, topic string, part int32) []string {
	t.Helper()
	client := sharelogv1.NewLogServiceClient(conn)
	var out []string
	for off := int64(0); ; {
		var resp *sharelogv1.FetchResponse
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			resp, err = client.Fetch(ctx, &sharelogv1.FetchRequest{Topic: topic, Partition: part, Offset: off, MaxRecords: 1000})
			require.True(t, err == nil || retryable(err), "fetch: %v", err)
			return err == nil
		}, 20*time.Second, 50*time.Millisecond)
		for _, r := range resp.GetRecords() {
			out = append(out, fmt.Sprintf("%s@%d", r.GetKey(), r.GetOffset()+1))
			off = r.GetOffset() + 1
		}
		if off >= resp.GetHighWatermark() || len(resp.GetRecords()) == 0 {
			return out
		}
	}
}

// waitDCP waits until every vBucket received want[vb] mutations.
func (f *dcpFollower) waitDCP(t *testing.T, want map[uint16]int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		done := true
		for vb, n := range want {
			done = done && f.received(vb) >= n
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			got := map[uint16]int{}
			for vb := range want {
				got[vb] = f.received(vb)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			t.Fatalf("DCP received %v of %v within %v (ends %v, open errors %v)", got, want, within, f.ends, f.openErrs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check compares what every vBucket received with its partition's log:
// each record exactly once, in order.
func (f *dcpFollower) check(t *testing.T, conn grpc.ClientConnInterface, topic string, parts int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Empty(t, f.dups, "mutations received twice")
	for p := range parts {
		require.Equal(t, logKeys(t, conn, topic, int32(p)), f.keys[uint16(p)], "vBucket %d against its partition's log", p)
	}
}

// TestDCPPartitionedCluster: a DCPAgent seeded with one instance of a
// 2-instance partitioned cluster learns both nodes and each vBucket's
// owner from the bucket config, streams every vBucket to its end
// (records produced through either instance); when a third instance
// joins, the streams of the partitions that move to it end with "state
// changed" and resume there; after SIGTERM of one instance its vBuckets
// resume at the others. Every record of every partition's log arrives
// exactly once.
func TestDCPPartitionedCluster(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	a := startMember(t, js.URL(), prefix, "a", "--cluster-mode", "partitioned", "--dcp-addr", "127.0.0.1:0")
	a.waitReadyz(t, "cluster: partitioned", 15*time.Second)
	b := startMember(t, js.URL(), prefix, "b", "--cluster-mode", "partitioned", "--dcp-addr", "127.0.0.1:0")
	b.waitReadyz(t, "cluster: partitioned", 15*time.Second)
	const parts, n = 4, 40
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, err := sharelogv1.NewLogServiceClient(a.conn).CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "t", Partitions: parts})
		return err == nil
	}, 10*time.Second, 100*time.Millisecond)
	owners := waitSpread(t, a, parts, []string{"a", "b"}, 20*time.Second)

	for p := range int32(parts) {
		via := a.conn
		if p%2 == 1 {
			via = b.conn
		}
		produceKeys(t, via, "t", p, 0, n)
	}

	f := newDCPFollower(t, "t", dcpAddrOf(t, a))
	snap, err := f.agent.ConfigSnapshot()
	require.NoError(t, err)
	nvb, err := snap.NumVbuckets()
	require.NoError(t, err)
	require.Equal(t, parts, nvb)
	nsrv, err := snap.NumServers()
	require.NoError(t, err)
	require.Equal(t, 2, nsrv, "the config lists both instances")
	// Each vBucket on its partition's owner: the vBuckets of one server
	// are one instance's partitions.
	byServer := map[int]string{}
	for p := range parts {
		srv, err := snap.VbucketToServer(uint16(p), 0)
		require.NoError(t, err)
		owner := owners[fmt.Sprintf("t/%d", p)].GetOwnerId()
		if prev, ok := byServer[srv]; ok {
			require.Equal(t, prev, owner, "vBucket %d is on server %d with another instance's partitions", p, srv)
		}
		byServer[srv] = owner
	}
	require.Len(t, byServer, 2, "the vBuckets are on both instances")
	// A's answer to a stream request for one of b's vBuckets:
	// NOT_MY_VBUCKET with the config naming b for it.
	for p := range parts {
		if owners[fmt.Sprintf("t/%d", p)].GetOwnerId() != "b" {
			continue
		}
		st, cfg := dcpNotMyVBucket(t, dcpAddrOf(t, a), "t", uint16(p))
		require.Equal(t, memd.StatusNotMyVBucket, st)
		require.NotNil(t, cfg, "the config is in the body")
		m := cfg["vBucketServerMap"].(map[string]any)
		srv := m["vBucketMap"].([]any)[p].([]any)[0].(float64)
		require.Equal(t, dcpAddrOf(t, b), m["serverList"].([]any)[int(srv)], "vBucket %d's server in a's config", p)
		require.EqualValues(t, snap.RevID(), cfg["rev"], "the same rev as the agent's config")
		break
	}

	want := map[uint16]int{}
	for p := range uint16(parts) {
		go f.open(p)
		want[p] = n
	}
	f.waitDCP(t, want, 20*time.Second)
	f.check(t, a.conn, "t", parts)

	// c joins: some partitions move to it while their owners keep
	// running. Their streams end with "state changed" and resume at c,
	// which the agent learns from the config.
	c := startMember(t, js.URL(), prefix, "c", "--cluster-mode", "partitioned", "--dcp-addr", "127.0.0.1:0")
	c.waitReadyz(t, "cluster: partitioned", 15*time.Second)
	spread := waitSpread(t, a, parts, []string{"a", "b", "c"}, 20*time.Second)
	moved := 0
	for p := range parts {
		if spread[fmt.Sprintf("t/%d", p)].GetOwnerId() != owners[fmt.Sprintf("t/%d", p)].GetOwnerId() {
			moved++
		}
	}
	require.Positive(t, moved)
	for p := range int32(parts) {
		produceKeys(t, c.conn, "t", p, n, n)
		want[uint16(p)] = 2 * n
	}
	f.waitDCP(t, want, 30*time.Second)
	f.check(t, a.conn, "t", parts)
	f.mu.Lock()
	t.Logf("c joined, %d partitions moved: stream ends %v, resumes %d, refused opens %v", moved, f.ends, f.resumes, f.openErrs)
	require.GreaterOrEqual(t, f.ends["state changed"], moved, "the streams of the moved partitions ended with state changed")
	resumed := f.resumes
	f.mu.Unlock()

	// SIGTERM of b: its partitions move to a and c, its streams end and
	// resume there while records keep coming through a.
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	for p := range int32(parts) {
		produceKeys(t, a.conn, "t", p, 2*n, n)
		want[uint16(p)] = 3 * n
	}
	waitSpread(t, a, parts, []string{"a", "c"}, 15*time.Second)
	f.waitDCP(t, want, 30*time.Second)
	f.check(t, a.conn, "t", parts)
	f.mu.Lock()
	t.Logf("after b's SIGTERM: stream ends %v, resumes %d, refused opens %v", f.ends, f.resumes, f.openErrs)
	require.Greater(t, f.resumes, resumed, "b's streams ended and were resumed elsewhere")
	f.mu.Unlock()
}

// TestDCPActiveStandbyFailover: in active-standby mode every vBucket is
// on the active instance; the agent streams through a failover (SIGKILL
// of the active instance): the standby takes over, the config names it
// for every vBucket, and the streams resume there with every record
// exactly once.
func TestDCPActiveStandbyFailover(t *testing.T) {
	// The standby reads the topics through its own store, or through the
	// Kafka listener's catalog when it has one.
	t.Run("dcp only", func(t *testing.T) { testDCPActiveStandbyFailover(t) })
	t.Run("with kafka", func(t *testing.T) { testDCPActiveStandbyFailover(t, "--kafka-addr", "127.0.0.1:0") })
}

func testDCPActiveStandbyFailover(t *testing.T, extra ...string) {
	js := startJS(t)
	prefix := js.Prefix()
	a := startMember(t, js.URL(), prefix, "a", append([]string{"--dcp-addr", "127.0.0.1:0"}, extra...)...)
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	b := startMember(t, js.URL(), prefix, "b", append([]string{"--dcp-addr", "127.0.0.1:0"}, extra...)...)
	b.waitReadyz(t, "forwarding to a", 10*time.Second)
	const parts, n = 3, 30
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, err := sharelogv1.NewLogServiceClient(a.conn).CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "t", Partitions: parts})
		return err == nil
	}, 10*time.Second, 100*time.Millisecond)
	for p := range int32(parts) {
		produceKeys(t, b.conn, "t", p, 0, n) // forwarded to a
	}

	// Seeded with the standby only: its config sends the agent to a.
	f := newDCPFollower(t, "t", dcpAddrOf(t, b))
	snap, err := f.agent.ConfigSnapshot()
	require.NoError(t, err)
	nsrv, err := snap.NumServers()
	require.NoError(t, err)
	require.Equal(t, 2, nsrv, "the config lists both instances")
	want := map[uint16]int{}
	for p := range uint16(parts) {
		go f.open(p)
		want[p] = n
	}
	f.waitDCP(t, want, 20*time.Second)
	f.check(t, a.conn, "t", parts)

	require.NoError(t, a.cmd.Process.Kill())
	b.waitReadyz(t, "cluster: active", leaseTTL+5*time.Second)
	for p := range int32(parts) {
		produceKeys(t, b.conn, "t", p, n, n)
		want[uint16(p)] = 2 * n
	}
	f.waitDCP(t, want, 30*time.Second)
	f.check(t, b.conn, "t", parts)
	f.mu.Lock()
	t.Logf("stream ends %v, resumes %d, refused opens %v", f.ends, f.resumes, f.openErrs)
	require.Positive(t, f.resumes, "the streams at a ended and were resumed at b")
	f.mu.Unlock()
}
