package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/couchbase/gocbcore/v10"
	"github.com/couchbase/gocbcore/v10/memd"

	"github.com/sharelog/sharelog/bench/internal/report"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// S4 compares the DCP listener (docs/dcp.md) with gRPC StreamChanges on the
// same server: the backfill of one partition of s4Recs records of 1 KiB
// (distinct keys) by gocbcore v10's DCPAgent (an ordered stream from seqno
// 0 to the high seqno) and by the harness's StreamChanges client (ordered,
// from 0 to the high watermark). Both sides run on one server instance, in
// alternating order between runs.

func s4Group() group {
	g := group{name: "S4 DCP listener (gocbcore DCPAgent) vs gRPC StreamChanges", ids: []string{"S4"}, max: 10 * time.Minute}
	g.rows = []rowSpec{
		{key: "s4-backfill", id: "S4", name: "Backfill one partition of 1 KiB records from the start: gocbcore DCPAgent vs gRPC StreamChanges",
			unit: "rec/s", dir: report.Custom, selfPeer: true, peerName: "(gRPC, self)", ratioLabel: "DCP/gRPC time",
			bar: report.AtMostBar(1.3, "DCP ≤ 1.3× slower")},
		{key: "s4-rate", id: "S4", name: "DCP backfill rate (mutations/s)",
			unit: "rec/s", dir: report.Custom, ratioLabel: "mutations/s", ratioAbs: true, bar: report.AtLeastBar(300_000, "≥ 300k mutations/s")},
	}
	g.ours = s4Ours
	return g
}

func s4Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	p, c, stop, err := e.startDialed("s4", "--fsync", "never", "--dcp-addr", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stop()
	if p.dcpAddr == "" {
		return errors.New("the server did not report a dcp_addr")
	}
	n := e.sz.s4Recs
	const topic = "s4"
	if err := createTopic(ctx, c, topic, 1, 0); err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: topic, batch: 1000, producers: 2, total: n, maxDur: 10 * time.Minute,
		value: payload(recordSize, 4), key: dataKey}); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	e.logf("  prefilled %d records in %v", n, time.Since(t0).Round(time.Millisecond))
	_, hw, _, err := partitionInfo(ctx, c, topic, 0)
	if err != nil {
		return err
	}
	if hw != n {
		return fmt.Errorf("high watermark %d, want %d", hw, n)
	}
	o.part([]string{"s4-backfill", "s4-rate"}, func() error {
		var grpcRes, dcpRes meas
		dcpFirst := rep%2 == 1
		for _, dcp := range []bool{dcpFirst, !dcpFirst} {
			if dcp {
				m := p.phase()
				d, err := s4DCP(ctx, p.dcpAddr, topic, uint64(hw))
				ph := m.done()
				if err != nil {
					return fmt.Errorf("dcp: %w", err)
				}
				dcpRes = newMeas(float64(hw) / d.Seconds())
				dcpRes.cpu, dcpRes.rss = ph.cpuPerM(hw), ph.rssMiB
			} else {
				m := p.phase()
				res, err := streamChanges(ctx, c, &sharelogv1.StreamChangesRequest{Topic: topic, Partition: 0, StartOffset: 0, EndOffset: ptr(hw),
					OsoMode: sharelogv1.OsoMode_OSO_MODE_OFF}, nil)
				ph := m.done()
				if err != nil {
					return fmt.Errorf("grpc: %w", err)
				}
				if res.items != hw {
					return fmt.Errorf("grpc: %d items, want %d", res.items, hw)
				}
				grpcRes = newMeas(float64(hw) / res.elapsed.Seconds())
				grpcRes.cpu, grpcRes.rss = ph.cpuPerM(hw), ph.rssMiB
			}
		}
		dcpRes.ratio = grpcRes.value / dcpRes.value
		dcpRes.note = fmt.Sprintf("%d records of 1 KiB each way, every seqno/offset once and in order; DCP: gocbcore %s DCPAgent, ordered stream, "+
			"1 MiB connection buffer with buffer acks; gRPC: StreamChanges OSO off", hw, "v10.8.1")
		o.set("s4-backfill", dcpRes)
		o.set("s4-backfill#peer", grpcRes)
		rate := newMeas(dcpRes.value)
		rate.ratio = dcpRes.value
		rate.note = "the DCP side of the row above"
		o.set("s4-rate", rate)
		return nil
	})
	return nil
}

// s4DCP streams vBucket 0 of topic from seqno 0 to end with a gocbcore
// DCPAgent and returns the time from the stream request to STREAM_END,
// checking that every seqno 1..end arrives once, in order.
func s4DCP(ctx context.Context, addr, topic string, end uint64) (time.Duration, error) {
	agent, err := gocbcore.CreateDcpAgent(&gocbcore.DCPAgentConfig{
		UserAgent: "sharelog-bench", BucketName: topic,
		SeedConfig:       gocbcore.SeedConfig{MemdAddrs: []string{addr}},
		SecurityConfig:   gocbcore.SecurityConfig{Auth: gocbcore.PasswordAuthProvider{}},
		EnableCCCPPoller: true,
		DCPConfig:        gocbcore.DCPConfig{BufferSize: 1 << 20},
	}, "sharelog-bench-s4", memd.DcpOpenFlagProducer)
	if err != nil {
		return 0, err
	}
	defer agent.Close()
	ready := make(chan error, 1)
	if _, err := agent.WaitUntilReady(time.Now().Add(30*time.Second), gocbcore.WaitUntilReadyOptions{},
		func(_ *gocbcore.WaitUntilReadyResult, err error) { ready <- err }); err != nil {
		return 0, err
	}
	if err := <-ready; err != nil {
		return 0, err
	}
	fl := make(chan []gocbcore.FailoverEntry, 1)
	errs := make(chan error, 2)
	if _, err := agent.GetFailoverLog(0, func(e []gocbcore.FailoverEntry, err error) {
		if err != nil {
			errs <- err
			return
		}
		fl <- e
	}); err != nil {
		return 0, err
	}
	var vbuuid gocbcore.VbUUID
	select {
	case e := <-fl:
		vbuuid = e[0].VbUUID
	case err := <-errs:
		return 0, err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	obs := &s4Observer{done: make(chan error, 1)}
	t0 := time.Now()
	if _, err := agent.OpenStream(0, 0, vbuuid, 0, gocbcore.SeqNo(end), 0, 0, obs, gocbcore.OpenStreamOptions{},
		func(_ []gocbcore.FailoverEntry, err error) {
			if err != nil {
				obs.finish(err)
			}
		}); err != nil {
		return 0, err
	}
	select {
	case err := <-obs.done:
		if err != nil {
			return 0, err
		}
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	d := time.Since(t0)
	if obs.last != end {
		return 0, fmt.Errorf("the stream ended at seqno %d, want %d", obs.last, end)
	}
	return d, nil
}

// s4Observer checks the seqnos of one ordered stream.
type s4Observer struct {
	last uint64
	bad  error
	once sync.Once
	done chan error
}

func (o *s4Observer) finish(err error) { o.once.Do(func() { o.done <- err }) }

func (o *s4Observer) SnapshotMarker(gocbcore.DcpSnapshotMarker) {}
func (o *s4Observer) Mutation(m gocbcore.DcpMutation) {
	if m.SeqNo != o.last+1 && o.bad == nil {
		o.bad = fmt.Errorf("seqno %d after %d", m.SeqNo, o.last)
	}
	o.last = m.SeqNo
}
func (o *s4Observer) Deletion(d gocbcore.DcpDeletion) {
	if o.bad == nil {
		o.bad = fmt.Errorf("a deletion at seqno %d", d.SeqNo)
	}
}
func (o *s4Observer) Expiration(gocbcore.DcpExpiration) {}
func (o *s4Observer) End(_ gocbcore.DcpStreamEnd, err error) {
	if err == nil {
		err = o.bad
	}
	o.finish(err)
}
func (o *s4Observer) CreateCollection(gocbcore.DcpCollectionCreation)     {}
func (o *s4Observer) DeleteCollection(gocbcore.DcpCollectionDeletion)     {}
func (o *s4Observer) FlushCollection(gocbcore.DcpCollectionFlush)         {}
func (o *s4Observer) CreateScope(gocbcore.DcpScopeCreation)               {}
func (o *s4Observer) DeleteScope(gocbcore.DcpScopeDeletion)               {}
func (o *s4Observer) ModifyCollection(gocbcore.DcpCollectionModification) {}
func (o *s4Observer) OSOSnapshot(gocbcore.DcpOSOSnapshot)                 {}
func (o *s4Observer) SeqNoAdvanced(gocbcore.DcpSeqNoAdvanced)             {}
