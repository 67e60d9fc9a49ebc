package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sharelog/sharelog/bench/internal/report"
	"github.com/sharelog/sharelog/bench/internal/stats"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

const recordSize = 1024

// groups lists every scenario group in run order.
func groups(e *env) []group {
	return []group{p1Group(), p2Group(), g1Group(), prefilledGroup(e), c3Group(), c4Group(), c5Group(), c6Group(), d1Group(e), s3Group(e), k1Group(), k2Group(), k3Group(), k4Group(), s4Group(), x1Group(), x2Group(), x3Group(), x4Group()}
}

type p1Config struct{ batch, producers int }

var p1Configs = []p1Config{{1, 1}, {1, 4}, {100, 1}, {100, 4}, {1000, 1}, {1000, 4}}

func (c p1Config) key() string { return fmt.Sprintf("b%d-p%d", c.batch, c.producers) }

func p1Group() group {
	g := group{name: "P1 produce, fsync never", ids: []string{"P1"}, max: 10 * time.Minute}
	for _, c := range p1Configs {
		bar := report.Bar{}
		if c.batch >= 100 {
			bar = report.AtLeastBar(2, "≥ 2× JetStream async publish")
		}
		g.rows = append(g.rows, rowSpec{key: c.key(), id: "P1", name: fmt.Sprintf("1 KiB, batch %d, %d producer(s)", c.batch, c.producers),
			unit: "rec/s", dir: report.OursOverPeer, bar: bar, peer: true, cpu: true})
	}
	g.rows = append(g.rows, rowSpec{key: "p1b", id: "P1b", name: "1 KiB, batch 1000, 4 producers, fsync never: record payload MiB/s vs sequential write",
		unit: "MiB/s", dir: report.Custom, ratioLabel: "of seq. write MiB/s", bar: report.AtLeastBar(0.5, "≥ 50% of the sequential write bandwidth")})
	g.ours = func(ctx context.Context, e *env, rep int, o *runOut) error {
		return produceGroupOurs(ctx, e, o, "p1", []string{"--fsync", "never"}, p1Configs, e.p1Total)
	}
	g.peer = func(ctx context.Context, e *env, rep int, o *runOut) error {
		return produceGroupPeer(ctx, e, o, "p1", false, p1Configs, e.p1Total)
	}
	return g
}

func (e *env) p1Total(c p1Config) (int64, time.Duration) {
	if c.batch == 1 {
		return e.sz.p1Single, e.sz.p1Cap
	}
	return e.sz.p1Batched, e.sz.p1Cap
}

var p2Configs = []p1Config{{100, 1}, {100, 4}, {100, 16}}

func p2Group() group {
	g := group{name: "P2 produce, fsync before ack", ids: []string{"P2"}, max: 10 * time.Minute}
	for _, c := range p2Configs {
		g.rows = append(g.rows, rowSpec{key: c.key(), id: "P2", name: fmt.Sprintf("durable, 1 KiB, batch %d, %d producer(s)", c.batch, c.producers),
			unit: "rec/s", dir: report.OursOverPeer, bar: report.AtLeastBar(20, "≥ 20× JetStream sync_interval: always"), peer: true, cpu: true})
	}
	for _, c := range p2Configs {
		g.rows = append(g.rows, rowSpec{key: "ack-" + c.key(), id: "P2", name: fmt.Sprintf("durable ack p99, batch %d, %d producer(s), vs write+fdatasync of %d KiB", c.batch, c.producers, commitBytes(c.producers)/1024),
			unit: "ms p99", dir: report.Custom, ratioLabel: "ours p99 / (2 × commit ref. p99 + 1 ms)",
			bar: report.AtMostBar(1, "ack p99 ≤ 2 × write+fdatasync p99 of one group commit + 1 ms"), peer: true})
	}
	// The first yardstick (a 4 KiB fsync), kept as information.
	for _, c := range p2Configs {
		g.rows = append(g.rows, rowSpec{key: "ackv1-" + c.key(), id: "P2", name: fmt.Sprintf("durable ack p99, batch %d, %d producer(s), vs 4 KiB fsync (v1 yardstick, information)", c.batch, c.producers),
			unit: "ms p99", dir: report.Custom, ratioLabel: "ours p99 / (fsync p99 + 1 ms)"})
	}
	g.rows = append(g.rows, rowSpec{key: "p2b", id: "P2b", name: "durable, 1 KiB, batch 100, 16 producers: record payload MiB/s vs sequential write",
		unit: "MiB/s", dir: report.Custom, ratioLabel: "of seq. write MiB/s", bar: report.AtLeastBar(0.25, "≥ 25% of the sequential write bandwidth")})
	g.ours = func(ctx context.Context, e *env, rep int, o *runOut) error {
		return produceGroupOurs(ctx, e, o, "p2", []string{"--fsync", "always"}, p2Configs, e.p2Total)
	}
	g.peer = func(ctx context.Context, e *env, rep int, o *runOut) error {
		return produceGroupPeer(ctx, e, o, "p2", true, p2Configs, e.p2Total)
	}
	return g
}

func (e *env) p2Total(p1Config) (int64, time.Duration) { return e.sz.p2Records, e.sz.p2Cap }

// produceGroupOurs starts one sharelog and runs each configuration on a
// fresh single-partition topic.
func produceGroupOurs(ctx context.Context, e *env, o *runOut, prefix string, flags []string, cfgs []p1Config, total func(p1Config) (int64, time.Duration)) error {
	p, adm, stop, err := e.startDialed(prefix, flags...)
	if err != nil {
		return err
	}
	defer stop()
	value := payload(recordSize, 1)
	for _, c := range cfgs {
		keys := []string{c.key(), "ack-" + c.key(), "ackv1-" + c.key()}
		bwKey := bandwidthRow(prefix, c)
		if bwKey != "" {
			keys = append(keys, bwKey)
		}
		o.part(keys, func() error {
			topic := prefix + "-" + c.key()
			if err := createTopic(ctx, adm, topic, 1, 0); err != nil {
				return err
			}
			n, capDur := total(c)
			m := p.phase()
			res, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: topic, batch: c.batch, producers: c.producers, total: n, maxDur: capDur, value: value})
			ph := m.done()
			if err != nil {
				return err
			}
			if err := p.alive(); err != nil {
				return err
			}
			mm := newMeas(res.rate())
			mm.p50, mm.p99 = res.lat.PercentileMs(50), res.lat.PercentileMs(99)
			mm.cpu, mm.rss = ph.cpuPerM(res.acked), ph.rssMiB
			mm.note = fmt.Sprintf("%d records acknowledged in %v, high watermark verified", res.acked, res.elapsed.Round(time.Millisecond))
			o.set(c.key(), mm)
			ack := newMeas(mm.p99)
			ack.p50, ack.p99 = mm.p50, mm.p99
			ref, ok := e.commitP99[c.producers]
			if !ok {
				ref = nan // no reference of that size: the row shows no ratio
			}
			ack.ratio = ackRefRatio(mm.p99, ref)
			ack.note = fmt.Sprintf("reference: append %d KiB + fdatasync p99 %.3f ms (start of run); bar %.3f ms", commitBytes(c.producers)/1024, ref, 2*ref+1)
			o.set("ack-"+c.key(), ack)
			v1 := newMeas(mm.p99)
			v1.p50, v1.p99 = mm.p50, mm.p99
			v1.ratio = mm.p99 / (e.fsyncP99 + 1)
			o.set("ackv1-"+c.key(), v1)
			if bwKey != "" {
				bw := newMeas(payloadMiBps(res.rate(), recordSize))
				bw.ratio = bw.value / e.seqWrite
				bw.note = fmt.Sprintf("%.0f rec/s × %d B of record value = %.1f MiB/s; sequential write %.1f MiB/s (start of run)", res.rate(), recordSize, bw.value, e.seqWrite)
				o.set(bwKey, bw)
			}
			return nil
		})
	}
	return nil
}

// bandwidthRow names the row (P1b, P2b) that judges a produce
// configuration's payload bandwidth against the disk's sequential write
// bandwidth, or "" for configurations without one.
func bandwidthRow(prefix string, c p1Config) string {
	switch {
	case prefix == "p1" && c == p1Config{1000, 4}:
		return "p1b"
	case prefix == "p2" && c == p1Config{100, 16}:
		return "p2b"
	}
	return ""
}

// payloadMiBps is the record payload bandwidth of a produce rate: the
// record values only (not keys, framing, indexes or protobuf overhead).
func payloadMiBps(recPerSec float64, valueBytes int) float64 {
	return recPerSec * float64(valueBytes) / (1 << 20)
}

// ackRefRatio is P2's version-2 latency ratio: the ack p99 over twice the
// p99 of one group commit's write + fdatasync (one commit in progress when
// the request arrives, then its own) plus 1 ms. 1 is the bar.
func ackRefRatio(ackP99, refP99 float64) float64 { return ackP99 / (2*refP99 + 1) }

func produceGroupPeer(ctx context.Context, e *env, o *runOut, prefix string, syncAlways bool, cfgs []p1Config, total func(p1Config) (int64, time.Duration)) error {
	dir, err := e.dataDir(prefix + "-nats")
	if err != nil {
		return err
	}
	p, err := startNATS(e.natsBin, dir, syncAlways)
	if err != nil {
		return err
	}
	defer p.stop()
	nc, js, err := natsConnect(p.natsURL, "admin")
	if err != nil {
		return err
	}
	defer nc.Close()
	value := payload(recordSize, 1)
	for _, c := range cfgs {
		o.part([]string{c.key(), "ack-" + c.key()}, func() error {
			name := strings.ToUpper(prefix + "_" + strings.ReplaceAll(c.key(), "-", "_"))
			subj := prefix + "." + c.key()
			if _, err := createStream(ctx, js, name, subj); err != nil {
				return err
			}
			n, capDur := total(c)
			m := p.phase()
			res, err := produceNATS(ctx, p.natsURL, produceSpec{topic: name, subject: subj, batch: c.batch, producers: c.producers, total: n, maxDur: capDur, value: value})
			ph := m.done()
			if err != nil {
				return err
			}
			mm := newMeas(res.rate())
			mm.p50, mm.p99 = res.lat.PercentileMs(50), res.lat.PercentileMs(99)
			mm.cpu, mm.rss = ph.cpuPerM(res.acked), ph.rssMiB
			o.set(c.key(), mm)
			ack := newMeas(mm.p99)
			ack.p50, ack.p99 = mm.p50, mm.p99
			o.set("ack-"+c.key(), ack)
			return nil
		})
	}
	return nil
}

// G1: the same Produce through the REST gateway and through gRPC.
func g1Group() group {
	g := group{name: "G1 REST gateway vs gRPC", ids: []string{"G1"}, max: 5 * time.Minute}
	for _, b := range []int{1, 100} {
		g.rows = append(g.rows, rowSpec{key: fmt.Sprintf("b%d", b), id: "G1", name: fmt.Sprintf("Produce via REST vs gRPC, batch %d, 1 client", b),
			unit: "rec/s", dir: report.Custom, selfPeer: true, peerName: "(gRPC, self)", ratioLabel: "REST/gRPC time",
			bar: report.AtMostBar(3, "REST ≤ 3× slower")})
	}
	g.ours = func(ctx context.Context, e *env, rep int, o *runOut) error {
		p, c, stop, err := e.startDialed("g1", "--fsync", "never")
		if err != nil {
			return err
		}
		defer stop()
		value := payload(recordSize, 2)
		for _, b := range []int{1, 100} {
			key := fmt.Sprintf("b%d", b)
			o.part([]string{key, key + "#peer"}, func() error {
				calls := e.sz.g1Calls1
				if b > 1 {
					calls = e.sz.g1Calls100
				}
				topic := "g1-" + key
				if err := createTopic(ctx, c, topic, 1, 0); err != nil {
					return err
				}
				grpcRes, err := g1GRPC(ctx, p, c, topic, b, calls, value)
				if err != nil {
					return err
				}
				restRes, err := g1REST(ctx, p, topic, b, calls, value)
				if err != nil {
					return err
				}
				_, hw, _, err := partitionInfo(ctx, c, topic, 0)
				if err != nil {
					return err
				}
				if want := int64(2 * calls * b); hw != want {
					return fmt.Errorf("high watermark %d, want %d", hw, want)
				}
				restRes.ratio = grpcRes.value / restRes.value
				restRes.note = fmt.Sprintf("%d calls each way, high watermark verified; REST body pre-encoded JSON (base64 values)", calls)
				o.set(key, restRes)
				o.set(key+"#peer", grpcRes)
				return nil
			})
		}
		return nil
	}
	return g
}

func g1GRPC(ctx context.Context, p *proc, c *client, topic string, batch, calls int, value []byte) (meas, error) {
	recs := make([]*sharelogv1.Record, batch)
	for i := range recs {
		recs[i] = &sharelogv1.Record{Key: []byte(fmt.Sprintf("k%06d", i)), Value: value}
	}
	part := int32(0)
	var lat stats.Latencies
	m := p.phase()
	for range calls {
		t := time.Now()
		resp, err := c.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: topic, Partition: &part, Records: recs})
		if err != nil {
			return meas{}, classify("LogService.Produce", err)
		}
		lat.Add(time.Since(t))
		if len(resp.GetResults()) != batch {
			return meas{}, fmt.Errorf("gRPC Produce: %d results for %d records", len(resp.GetResults()), batch)
		}
	}
	ph := m.done()
	n := int64(calls * batch)
	mm := newMeas(float64(n) / ph.elapsed.Seconds())
	mm.p50, mm.p99, mm.cpu, mm.rss = lat.PercentileMs(50), lat.PercentileMs(99), ph.cpuPerM(n), ph.rssMiB
	return mm, nil
}

func g1REST(ctx context.Context, p *proc, topic string, batch, calls int, value []byte) (meas, error) {
	type rec struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	body := struct {
		Partition int   `json:"partition"`
		Records   []rec `json:"records"`
	}{}
	v := base64.StdEncoding.EncodeToString(value)
	for i := range batch {
		body.Records = append(body.Records, rec{Key: base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("k%06d", i))), Value: v})
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return meas{}, err
	}
	url := "http://" + p.httpAddr + "/v1/topics/" + topic + "/records"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	var lat stats.Latencies
	var parsed struct {
		Results []struct {
			Partition int    `json:"partition"`
			Offset    string `json:"offset"`
		} `json:"results"`
	}
	m := p.phase()
	for range calls {
		t := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
		if err != nil {
			return meas{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return meas{}, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return meas{}, err
		}
		lat.Add(time.Since(t))
		if resp.StatusCode == http.StatusNotImplemented {
			return meas{}, &errUnavailable{what: "REST Produce"}
		}
		if resp.StatusCode != http.StatusOK {
			return meas{}, fmt.Errorf("REST Produce: HTTP %d: %.200s", resp.StatusCode, b)
		}
		parsed.Results = parsed.Results[:0]
		if err := json.Unmarshal(b, &parsed); err != nil {
			return meas{}, fmt.Errorf("REST Produce response: %w", err)
		}
		if len(parsed.Results) != batch {
			return meas{}, fmt.Errorf("REST Produce: %d results for %d records", len(parsed.Results), batch)
		}
	}
	ph := m.done()
	n := int64(calls * batch)
	mm := newMeas(float64(n) / ph.elapsed.Seconds())
	mm.p50, mm.p99, mm.cpu, mm.rss = lat.PercentileMs(50), lat.PercentileMs(99), ph.cpuPerM(n), ph.rssMiB
	return mm, nil
}
