package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

var nan = math.NaN()

// errUnavailable marks a scenario part whose RPCs answered UNIMPLEMENTED.
type errUnavailable struct{ what string }

func (e *errUnavailable) Error() string { return e.what + " answered UNIMPLEMENTED" }

// classify turns an UNIMPLEMENTED status into errUnavailable naming the RPC.
func classify(what string, err error) error {
	if err == nil {
		return nil
	}
	var u *errUnavailable
	if errors.As(err, &u) {
		return err
	}
	if status.Code(err) == codes.Unimplemented {
		return &errUnavailable{what: what}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// meas is one run's measurement of one row.
type meas struct {
	value    float64 // headline: throughput or latency/duration
	p50, p99 float64 // ms, NaN if not measured
	cpu      float64 // CPU-s per 1M records
	rss      float64 // MiB
	ratio    float64 // for rows whose ratio is computed per run (Custom)
	note     string
}

func newMeas(value float64) meas {
	return meas{value: value, p50: nan, p99: nan, cpu: nan, rss: nan, ratio: nan}
}

// runOut collects the measurements and per-row errors of one run of a
// scenario group (one server instance, ours or peer).
type runOut struct {
	vals    map[string]meas
	errs    map[string]error
	skipped map[string]bool // rows this run deliberately did not measure
}

func newRunOut() *runOut {
	return &runOut{vals: map[string]meas{}, errs: map[string]error{}, skipped: map[string]bool{}}
}

// skip records that this run does not measure keys (and their self-peer
// keys) on purpose, e.g. S2 in the quick mode's later runs; aggregate
// leaves the run out of those rows instead of calling it a harness bug.
func (o *runOut) skip(keys []string) {
	for _, k := range keys {
		o.skipped[k] = true
		o.skipped[k+"#peer"] = true
	}
}

func (o *runOut) set(key string, m meas) { o.vals[key] = m }

// part runs fn; if it fails (or panics), every key it did not set gets the
// error, so one broken part never takes its neighbours down.
func (o *runOut) part(keys []string, fn func() error) {
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		return fn()
	}()
	if err == nil {
		return
	}
	o.fail(keys, err)
}

// fail marks every key (and its self-peer key+"#peer") not yet set with err.
func (o *runOut) fail(keys []string, err error) {
	for _, k := range keys {
		for _, kk := range []string{k, k + "#peer"} {
			if _, ok := o.vals[kk]; !ok {
				if _, has := o.errs[kk]; !has {
					o.errs[kk] = err
				}
			}
		}
	}
}

// payload returns n pseudo-random bytes (incompressible, reproducible).
func payload(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// client is one gRPC connection to sharelog with its three services.
type client struct {
	conn *grpc.ClientConn
	log  sharelogv1.LogServiceClient
	sg   sharelogv1.ShareGroupServiceClient
	cs   sharelogv1.ChangeStreamServiceClient
}

func dial(addr string) (*client, error) {
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(64<<20))}, aclDialOptions()...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	return &client{conn: conn, log: sharelogv1.NewLogServiceClient(conn),
		sg: sharelogv1.NewShareGroupServiceClient(conn), cs: sharelogv1.NewChangeStreamServiceClient(conn)}, nil
}

func (c *client) close() { c.conn.Close() }

func dialN(addr string, n int) ([]*client, func(), error) {
	cs := make([]*client, 0, n)
	closeAll := func() {
		for _, c := range cs {
			c.close()
		}
	}
	for range n {
		c, err := dial(addr)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cs = append(cs, c)
	}
	return cs, closeAll, nil
}

func createTopic(ctx context.Context, c *client, name string, partitions int32, segmentBytes int64) error {
	req := &sharelogv1.CreateTopicRequest{Name: name, Partitions: partitions}
	if segmentBytes > 0 {
		req.Config = &sharelogv1.TopicConfig{SegmentBytes: &segmentBytes}
	}
	_, err := c.log.CreateTopic(ctx, req)
	return classify("LogService.CreateTopic", err)
}

// partitionInfo returns (log start offset, high watermark, segment count).
func partitionInfo(ctx context.Context, c *client, topic string, partition int32) (lso, hw int64, segments int32, err error) {
	t, err := c.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: topic})
	if err != nil {
		return 0, 0, 0, classify("LogService.DescribeTopic", err)
	}
	for _, p := range t.GetPartitions() {
		if p.GetPartition() == partition {
			return p.GetLogStartOffset(), p.GetHighWatermark(), p.GetSegmentCount(), nil
		}
	}
	return 0, 0, 0, fmt.Errorf("DescribeTopic %s: no partition %d", topic, partition)
}

func ptr[T any](v T) *T { return &v }

func trimErr(err error) string {
	s := err.Error()
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return strings.ReplaceAll(s, "\n", " ")
}
