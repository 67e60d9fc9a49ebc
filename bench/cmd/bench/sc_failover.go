package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sharelog/sharelog/bench/internal/report"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// X3: SIGKILL of the active instance under produce + share-ack load. Three
// sharelog instances (a active, b and c standbys) on a 3-node NATS cluster;
// every client holds a connection to each instance, starts on a and moves
// to the next address whenever a call fails. The row's value is the time
// from the SIGKILL to the first successful Produce started after it (which
// can only be answered by a standby: a is dead); the bar is --lease-ttl +
// 2 s. Then the load stops, one consumer drains the group, and the run
// FAILS if an acknowledged record is missing or not at its offset, if a
// record whose ACCEPT was acknowledged is delivered again, or if the group
// does not end with every record accepted.

const (
	x3Members   = 3
	x3Producers = 2
	x3Consumers = 2
	x3Batch     = 10  // records per Produce
	x3Fetch     = 100 // records per ShareFetch
	x3CallLimit = time.Second
	x3Backoff   = 20 * time.Millisecond
	x3GroupID   = "x3"
	x3Topic     = "x3"
)

func x3Group() group {
	g := group{name: "X3 cluster failover under load", ids: []string{"X3"}, max: 5 * time.Minute}
	g.rows = []rowSpec{{key: "x3", id: "X3",
		name: "cluster mode: SIGKILL of the active instance under produce + share-ack load → first write through a standby",
		unit: "ms", dir: report.Custom, ratioLabel: "of --lease-ttl + 2 s",
		bar: report.AtMostBar(1, "≤ --lease-ttl + 2 s; no acknowledged record or ACCEPT lost")}}
	g.ours = x3Run
	return g
}

// x3Ledger is the clients' view of the run: what was acknowledged to them.
// Its checks are what X3 calls "nothing acknowledged lost".
type x3Ledger struct {
	mu         sync.Mutex
	produced   map[string]int64 // value -> offset, for every acknowledged produce
	accepted   map[int64]bool   // offsets whose ACCEPT was acknowledged
	seen       map[int64]bool   // offsets delivered at least once
	deliveries int64
	again      int64 // deliveries of an offset delivered before (locks of the dead instance, failed ACCEPTs)
	countAbove int64 // deliveries with delivery count > 1
	violations []string
}

func newX3Ledger() *x3Ledger {
	return &x3Ledger{produced: map[string]int64{}, accepted: map[int64]bool{}, seen: map[int64]bool{}}
}

func (l *x3Ledger) violate(format string, args ...any) {
	if len(l.violations) < 10 {
		l.violations = append(l.violations, fmt.Sprintf(format, args...))
	}
}

// produced notes an acknowledged Produce of values at offsets first...
func (l *x3Ledger) producedAt(values []string, first int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, v := range values {
		if prev, ok := l.produced[v]; ok {
			l.violate("value %q acknowledged at offsets %d and %d", v, prev, first+int64(i))
		}
		l.produced[v] = first + int64(i)
	}
}

// deliver notes one delivery; a record whose ACCEPT was acknowledged must
// never come again.
func (l *x3Ledger) deliver(off int64, count int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliveries++
	if l.seen[off] {
		l.again++
	}
	l.seen[off] = true
	if count > 1 {
		l.countAbove++
	}
	if l.accepted[off] {
		l.violate("offset %d delivered again (count %d) after its ACCEPT was acknowledged", off, count)
	}
	if count < 1 {
		l.violate("offset %d delivered with count %d", off, count)
	}
}

// acceptedAt notes acknowledged ACCEPTs.
func (l *x3Ledger) acceptedAt(offs []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, off := range offs {
		l.accepted[off] = true
	}
}

// check compares the ledger with the partition as read at the end (offset
// -> value, from offset 0: nothing is purged in X3), the high watermark and
// the group's share-partition start offset.
func (l *x3Ledger) check(log map[int64]string, hw, startOffset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []string
	errs = append(errs, l.violations...)
	var lost []string
	for v, off := range l.produced {
		if got, ok := log[off]; !ok || got != v {
			lost = append(lost, fmt.Sprintf("%q at %d (found %q)", v, off, got))
		}
		if off >= hw {
			lost = append(lost, fmt.Sprintf("%q at %d beyond the high watermark %d", v, off, hw))
		}
	}
	if len(lost) > 0 {
		sort.Strings(lost)
		errs = append(errs, fmt.Sprintf("%d acknowledged records lost or moved, e.g. %s", len(lost), strings.Join(lost[:min(3, len(lost))], ", ")))
	}
	if startOffset != hw {
		errs = append(errs, fmt.Sprintf("the group's start offset is %d after the drain, high watermark %d: not every record accepted", startOffset, hw))
	}
	if len(l.produced) == 0 {
		errs = append(errs, "no produce acknowledged")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// x3Conns is one client's connections, one per instance, and the one it
// currently uses.
type x3Conns struct {
	cs  []*client
	cur int
}

func (c *x3Conns) now() *client { return c.cs[c.cur] }
func (c *x3Conns) next()        { c.cur = (c.cur + 1) % len(c.cs) }

// x3Retryable is what a client may see while the active instance dies and
// a standby takes over: UNAVAILABLE (NOT_OWNER, OWNER_UNREACHABLE, the dead
// connection), its own call deadline, or SHARE_SESSION_NOT_FOUND (share
// sessions die with the instance that held them; docs/cluster.md).
func x3Retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.NotFound:
		return errorReason(err) == "SHARE_SESSION_NOT_FOUND"
	}
	return false
}

// errorReason is the reason of the status's ErrorInfo detail, or "".
func errorReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// x3Clock is when things happened, from the clients' view.
type x3Clock struct {
	mu        sync.Mutex
	killed    time.Time
	firstPut  time.Time // first successful Produce started after the kill
	putVia    int
	firstAck  time.Time // first acknowledged ACCEPT started after the kill
	errCodes  map[codes.Code]int
	otherErrs []string
}

// after reports whether a call started at t began after the kill.
func (k *x3Clock) after(t time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.killed.IsZero() && t.After(k.killed)
}

func (k *x3Clock) codes() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return fmt.Sprint(k.errCodes)
}

func (k *x3Clock) failed(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.errCodes[status.Code(err)]++
	if !x3Retryable(err) && len(k.otherErrs) < 5 {
		k.otherErrs = append(k.otherErrs, trimErr(err))
	}
}

func x3Run(ctx context.Context, e *env, rep int, o *runOut) error {
	ttl := e.sz.xLeaseTTL
	cl, err := e.startCluster(ctx, "x3", x3Members, ttl)
	if err != nil {
		return err
	}
	defer cl.stop()
	var addrs []string
	for _, m := range cl.members {
		addrs = append(addrs, m.grpcAddr)
	}
	var all []*client
	defer func() {
		for _, c := range all {
			c.close()
		}
	}()
	conns := func() (*x3Conns, error) {
		x := &x3Conns{}
		for _, a := range addrs {
			c, err := dial(a)
			if err != nil {
				return nil, err
			}
			all = append(all, c)
			x.cs = append(x.cs, c)
		}
		return x, nil
	}
	adm, err := conns()
	if err != nil {
		return err
	}
	if err := retryUnavailable(ctx, 20*time.Second, func() error { return createTopic(ctx, adm.now(), x3Topic, 1, 0) }); err != nil {
		return err
	}
	if err := retryUnavailable(ctx, 20*time.Second, func() error {
		return configureGroup(ctx, adm.now(), x3GroupID, &sharelogv1.ShareGroupConfig{AutoOffsetReset: ptr("earliest")})
	}); err != nil {
		return err
	}
	o.part([]string{"x3"}, func() error {
		led := newX3Ledger()
		clk := &x3Clock{errCodes: map[codes.Code]int{}}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var stopOnce sync.Once
		stopLoad := func() {
			stopOnce.Do(func() { close(stop) })
			wg.Wait()
		}
		defer stopLoad() // also when a step below returns early
		var workerErrs []error
		var errMu sync.Mutex
		fail := func(err error) {
			errMu.Lock()
			workerErrs = append(workerErrs, err)
			errMu.Unlock()
		}
		for w := range x3Producers {
			c, err := conns()
			if err != nil {
				return err
			}
			wg.Go(func() { x3Produce(ctx, c, w, led, clk, stop) })
		}
		for w := range x3Consumers {
			c, err := conns()
			if err != nil {
				return err
			}
			wg.Go(func() {
				if err := x3Consume(ctx, c, fmt.Sprintf("m%d", w), led, clk, stop); err != nil {
					fail(err)
				}
			})
		}
		time.Sleep(e.sz.xBefore)
		led.mu.Lock()
		producedBefore, acceptedBefore := len(led.produced), len(led.accepted)
		led.mu.Unlock()
		if producedBefore == 0 || acceptedBefore == 0 {
			return fmt.Errorf("no load before the kill: %d records produced, %d ACCEPTs acknowledged in %v (errors by code %v)",
				producedBefore, acceptedBefore, e.sz.xBefore, clk.codes())
		}
		clk.mu.Lock()
		clk.killed = time.Now()
		clk.mu.Unlock()
		if err := cl.members[0].cmd.Process.Kill(); err != nil {
			stopLoad()
			return fmt.Errorf("SIGKILL of the active instance: %w", err)
		}
		<-cl.members[0].exited
		// Load goes on until a write got through and e.sz.xAfter more, or
		// well past the bar.
		limit := ttl + 2*time.Second + 15*time.Second
		deadline := time.Now().Add(limit)
		for {
			clk.mu.Lock()
			got := !clk.firstPut.IsZero() && time.Since(clk.firstPut) >= e.sz.xAfter
			clk.mu.Unlock()
			if got || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		stopLoad()
		clk.mu.Lock()
		firstPut, firstAck, via := clk.firstPut, clk.firstAck, clk.putVia
		others := clk.otherErrs
		clk.mu.Unlock()
		codesSeen := clk.codes()
		if firstPut.IsZero() {
			return fmt.Errorf("no Produce succeeded within %v of the SIGKILL (errors by code %s)", limit, codesSeen)
		}
		if err := errors.Join(workerErrs...); err != nil {
			return err
		}
		if len(others) > 0 {
			return fmt.Errorf("errors other than UNAVAILABLE / deadline during the failover: %s", strings.Join(others, "; "))
		}
		// Drain through whichever instance answers, then read everything.
		dc, err := conns()
		if err != nil {
			return err
		}
		dc.next() // a is dead
		drainLimit := 60 * time.Second
		start, hw, err := x3Drain(ctx, dc, led, clk, drainLimit)
		if err != nil {
			return err
		}
		log, err := x3ReadAll(ctx, dc, hw)
		if err != nil {
			return err
		}
		if err := led.check(log, hw, start); err != nil {
			return err
		}
		took := firstPut.Sub(clk.killed)
		mm := newMeas(float64(took) / float64(time.Millisecond))
		mm.ratio = float64(took) / float64(ttl+2*time.Second)
		ackTook := "none"
		if !firstAck.IsZero() {
			ackTook = firstAck.Sub(clk.killed).Round(time.Millisecond).String()
		}
		roles := []string{}
		for i, m := range cl.members[1:] {
			roles = append(roles, fmt.Sprintf("%s: %s", cl.ids[i+1], firstLine(readyz(ctx, m))))
		}
		led.mu.Lock()
		mm.note = fmt.Sprintf("%d NATS nodes (`sync_interval: always`), %d sharelog instances, `--lease-ttl %v`; %d producers (batch %d) and %d share consumers (ShareFetch %d + ShareAcknowledge ACCEPT) on every instance's address, starting on the active one, next address on any error; SIGKILL after %v of load (%d records produced, %d ACCEPTs acknowledged by then); first write via %s, first acknowledged ACCEPT %s after the kill; %d records acknowledged, each found at its offset; %d ACCEPTs acknowledged, none delivered again; %d deliveries, %d of them again (%d with delivery count > 1: acquisitions are not durable, docs/cluster.md); group start offset = high watermark %d after the drain; client errors by gRPC code %s; after: %s",
			clusterNodes, x3Members, ttl, x3Producers, x3Batch, x3Consumers, x3Fetch, e.sz.xBefore, producedBefore, acceptedBefore, cl.ids[via], ackTook,
			len(led.produced), len(led.accepted), led.deliveries, led.again, led.countAbove, hw, codesSeen, strings.Join(roles, ", "))
		led.mu.Unlock()
		o.set("x3", mm)
		return nil
	})
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// x3Produce sends batches of x3Batch unique values until stop; a failed
// batch is sent again (through the next instance) until it is acknowledged.
func x3Produce(ctx context.Context, c *x3Conns, w int, led *x3Ledger, clk *x3Clock, stop <-chan struct{}) {
	part := int32(0)
	for i := 0; ; i++ {
		vals := make([]string, x3Batch)
		recs := make([]*sharelogv1.Record, x3Batch)
		for j := range vals {
			vals[j] = fmt.Sprintf("p%d-%d-%d", w, i, j)
			recs[j] = &sharelogv1.Record{Value: []byte(vals[j])}
		}
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			default:
			}
			t := time.Now()
			cctx, cancel := context.WithTimeout(ctx, x3CallLimit)
			resp, err := c.now().log.Produce(cctx, &sharelogv1.ProduceRequest{Topic: x3Topic, Partition: &part, Records: recs})
			cancel()
			if err == nil && len(resp.GetResults()) == x3Batch {
				led.producedAt(vals, resp.GetResults()[0].GetOffset())
				if clk.after(t) {
					clk.mu.Lock()
					if clk.firstPut.IsZero() {
						clk.firstPut, clk.putVia = time.Now(), c.cur
					}
					clk.mu.Unlock()
				}
				break
			}
			if err == nil {
				err = fmt.Errorf("produce of %d records answered %d results", x3Batch, len(resp.GetResults()))
			}
			clk.failed(err)
			c.next()
			time.Sleep(x3Backoff)
		}
	}
}

// x3Consume runs one share consumer until stop: ShareFetch, then
// ShareAcknowledge ACCEPT of everything acquired. Any failure starts a new
// session on the next instance; only an ACCEPT answered NONE counts as
// acknowledged. At stop it closes its session, releasing its locks.
func x3Consume(ctx context.Context, c *x3Conns, member string, led *x3Ledger, clk *x3Clock, stop <-chan struct{}) error {
	var epoch int32
	reset := func(err error) {
		clk.failed(err)
		epoch = 0
		c.next()
		time.Sleep(x3Backoff)
	}
	for {
		select {
		case <-stop:
			if epoch != 0 {
				cctx, cancel := context.WithTimeout(ctx, x3CallLimit)
				_, _ = c.now().sg.ShareFetch(cctx, &sharelogv1.ShareFetchRequest{GroupId: x3GroupID, MemberId: member, ShareSessionEpoch: -1})
				cancel()
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		acq, err := x3FetchOnce(ctx, c.now(), member, epoch, led)
		if err != nil {
			reset(err)
			continue
		}
		epoch = nextEpoch(epoch)
		if len(acq) == 0 {
			continue
		}
		t := time.Now()
		var offs []int64
		for _, a := range acq {
			for off := a.first; off <= a.last; off++ {
				offs = append(offs, off)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, x3CallLimit)
		resp, err := c.now().sg.ShareAcknowledge(cctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: x3GroupID, MemberId: member,
			ShareSessionEpoch: epoch, Topics: []*sharelogv1.ShareFetchTopic{{Topic: x3Topic,
				Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0, AcknowledgementBatches: acceptAll(acq)[0]}}}}})
		cancel()
		if err != nil {
			reset(err)
			continue
		}
		ok := false
		for _, tr := range resp.GetResponses() {
			for _, pr := range tr.GetPartitions() {
				ok = pr.GetPartition() == 0 && pr.GetErrorCode() == sharelogv1.ErrorCode_ERROR_CODE_NONE
			}
		}
		if !ok {
			reset(status.Errorf(codes.Unavailable, "ShareAcknowledge not answered NONE: %v", resp))
			continue
		}
		epoch = nextEpoch(epoch)
		led.acceptedAt(offs)
		if clk.after(t) {
			clk.mu.Lock()
			if clk.firstAck.IsZero() {
				clk.firstAck = time.Now()
			}
			clk.mu.Unlock()
		}
	}
}

// x3FetchOnce sends one ShareFetch (opening the session at epoch 0) and
// notes every acquired record in the ledger. A partition error is returned
// as UNAVAILABLE so the caller starts over.
func x3FetchOnce(ctx context.Context, c *client, member string, epoch int32, led *x3Ledger) ([]acquired, error) {
	req := &sharelogv1.ShareFetchRequest{GroupId: x3GroupID, MemberId: member, ShareSessionEpoch: epoch,
		MaxRecords: proto.Int32(x3Fetch), MaxWaitMs: 100}
	if epoch == 0 {
		req.Topics = []*sharelogv1.ShareFetchTopic{{Topic: x3Topic, Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0}}}}
	}
	cctx, cancel := context.WithTimeout(ctx, x3CallLimit)
	defer cancel()
	resp, err := c.sg.ShareFetch(cctx, req)
	if err != nil {
		return nil, err
	}
	var out []acquired
	for _, tr := range resp.GetResponses() {
		for _, pr := range tr.GetPartitions() {
			if pr.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				return nil, status.Errorf(codes.Unavailable, "ShareFetch partition %d: %v %s", pr.GetPartition(), pr.GetErrorCode(), pr.GetErrorMessage())
			}
			for _, a := range pr.GetAcquiredRecords() {
				out = append(out, acquired{partition: pr.GetPartition(), first: a.GetFirstOffset(), last: a.GetLastOffset(), deliveryCnt: a.GetDeliveryCount()})
				for off := a.GetFirstOffset(); off <= a.GetLastOffset(); off++ {
					led.deliver(off, a.GetDeliveryCount())
				}
			}
		}
	}
	return out, nil
}

// x3Drain consumes with a fresh member until the group's share-partition
// start offset reaches the high watermark; it returns both.
func x3Drain(ctx context.Context, c *x3Conns, led *x3Ledger, clk *x3Clock, within time.Duration) (start, hw int64, err error) {
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- x3Consume(ctx, c, "drain", led, clk, stop) }()
	adm := &x3Conns{cs: c.cs, cur: c.cur}
	deadline := time.Now().Add(within)
	for {
		start, hw, err = x3Progress(ctx, adm)
		if err == nil && start == hw {
			break
		}
		if err != nil {
			adm.next()
		}
		if time.Now().After(deadline) {
			close(stop)
			<-done
			if err != nil {
				return 0, 0, fmt.Errorf("drain: %w", err)
			}
			return 0, 0, fmt.Errorf("drain: the group's start offset is %d after %v, high watermark %d", start, within, hw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	return start, hw, <-done
}

// x3Progress is the group's share-partition start offset and the
// partition's high watermark.
func x3Progress(ctx context.Context, c *x3Conns) (start, hw int64, err error) {
	cctx, cancel := context.WithTimeout(ctx, x3CallLimit)
	defer cancel()
	_, hw, _, err = partitionInfo(cctx, c.now(), x3Topic, 0)
	if err != nil {
		return 0, 0, err
	}
	resp, err := c.now().sg.DescribeShareGroupOffsets(cctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: x3GroupID,
		Topics: []*sharelogv1.TopicPartitions{{Topic: x3Topic, Partitions: []int32{0}}}})
	if err != nil {
		return 0, 0, classify("ShareGroupService.DescribeShareGroupOffsets", err)
	}
	for _, t := range resp.GetTopics() {
		for _, p := range t.GetPartitions() {
			if t.GetTopic() != x3Topic || p.GetPartition() != 0 {
				continue
			}
			if p.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				return 0, 0, fmt.Errorf("DescribeShareGroupOffsets: %v %s", p.GetErrorCode(), p.GetErrorMessage())
			}
			start = p.GetStartOffset()
			return start, hw, nil
		}
	}
	return 0, 0, errors.New("DescribeShareGroupOffsets answered no partition")
}

// x3ReadAll fetches offsets [0, hw) of the partition.
func x3ReadAll(ctx context.Context, c *x3Conns, hw int64) (map[int64]string, error) {
	out := make(map[int64]string, hw)
	for next := int64(0); next < hw; {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.now().log.Fetch(cctx, &sharelogv1.FetchRequest{Topic: x3Topic, Partition: 0, Offset: next, MaxRecords: 1000})
		cancel()
		if err != nil {
			return nil, classify("LogService.Fetch", err)
		}
		if len(resp.GetRecords()) == 0 {
			return nil, fmt.Errorf("fetch at %d of %d returned nothing", next, hw)
		}
		for _, r := range resp.GetRecords() {
			if r.GetOffset() != next {
				return nil, fmt.Errorf("fetch: offset %d, want %d", r.GetOffset(), next)
			}
			out[next] = string(r.GetValue())
			next++
		}
	}
	return out, nil
}
