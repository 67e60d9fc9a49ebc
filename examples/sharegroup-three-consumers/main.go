// Command sharegroup-three-consumers shows a share group at work: it produces
// records to a topic, then runs three consumers of one group (three members,
// each with its own share session) until the topic is drained, and prints
// how many records each consumer accepted and the total.
//
// It exits with status 1 if the total differs from the records produced or
// if any record was accepted twice.
//
//	make run                                        # in one terminal
//	go run ./examples/sharegroup-three-consumers    # in another
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sharelog/sharelog/client/shareconsumer"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	addr       string
	topic      string
	group      string
	records    int
	partitions int
	produce    bool
	consumers  int
	idle       time.Duration
	verbose    bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("sharegroup-three-consumers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := os.Getenv("SHARELOG_ADDR")
	if addr == "" {
		addr = "127.0.0.1:9090"
	}
	stamp := time.Now().Format("20060102-150405.000")
	fs.StringVar(&o.addr, "addr", addr, "gRPC address of the server (env SHARELOG_ADDR)")
	fs.StringVar(&o.topic, "topic", "sharegroup-demo-"+stamp, "topic to consume (created if absent)")
	fs.StringVar(&o.group, "group", "sharegroup-demo-"+stamp, "share group (set to start at the earliest offset)")
	fs.IntVar(&o.records, "records", 1000, "records to produce; with -produce=false, records expected (0 = all the topic holds)")
	fs.IntVar(&o.partitions, "partitions", 3, "partitions of the topic, if it is created")
	fs.BoolVar(&o.produce, "produce", true, "produce the records first (false: consume what the topic holds)")
	fs.IntVar(&o.consumers, "consumers", 3, "consumers in the group")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "give up after this long without progress")
	fs.BoolVar(&o.verbose, "v", false, "log what the consumers do")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := demo(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// consumerStats counts one consumer's successful acceptances.
type consumerStats struct {
	name     string
	member   string
	accepted atomic.Int64
}

func demo(ctx context.Context, o options, stdout, stderr io.Writer) error {
	conn, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	logs := sharelogv1.NewLogServiceClient(conn)
	groups := sharelogv1.NewShareGroupServiceClient(conn)

	_, err = logs.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: o.topic, Partitions: int32(o.partitions)})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create topic %s: %w", o.topic, err)
	}
	// A new group starts at the latest offset by default: make it read the
	// topic from the start.
	if _, err := groups.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{
		GroupId: o.group,
		Config:  &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")},
	}); err != nil {
		return fmt.Errorf("configure group %s: %w", o.group, err)
	}

	expected := int64(o.records)
	switch {
	case o.produce:
		if err := produce(ctx, logs, o.topic, o.records); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "produced %d records to %s\n", o.records, o.topic)
	case o.records == 0:
		t, err := logs.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: o.topic})
		if err != nil {
			return err
		}
		for _, p := range t.GetPartitions() {
			expected += p.GetHighWatermark() - p.GetLogStartOffset()
		}
	}

	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// Every successful ACCEPT, per offset: a second one would be a duplicate.
	var mu sync.Mutex
	seen := map[string]int{}
	duplicates := 0
	var total atomic.Int64
	var lastProgress atomic.Int64
	lastProgress.Store(time.Now().UnixNano())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stats := make([]*consumerStats, o.consumers)
	var wg sync.WaitGroup
	errs := make(chan error, o.consumers)
	for i := range stats {
		st := &consumerStats{name: fmt.Sprintf("consumer-%d", i+1)}
		stats[i] = st
		c, err := shareconsumer.New(conn, shareconsumer.Config{
			GroupID:  o.group,
			Topics:   []string{o.topic},
			ClientID: st.name,
			// In a partitioned cluster each partition's records are served
			// by its owner: the consumer opens a session there.
			Dial: func(addr string) (grpc.ClientConnInterface, error) {
				return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			},
			// Implicit acknowledgement: each Poll accepts the records the
			// previous one returned.
			MaxRecords: 100,
			Logger:     logger.With("consumer", st.name),
			OnAcknowledgement: func(r shareconsumer.AckResult) {
				if r.Err != nil {
					logger.Warn("acknowledgement failed", "consumer", st.name, "partition", r.TopicPartition.String(), "err", r.Err)
					return
				}
				n := r.Count(shareconsumer.Accept)
				st.accepted.Add(n)
				if total.Add(n) >= expected {
					cancel() // drained: end the other consumers' long polls
				}
				lastProgress.Store(time.Now().UnixNano())
				mu.Lock()
				defer mu.Unlock()
				for _, rg := range r.Ranges {
					if rg.Type != shareconsumer.Accept {
						continue
					}
					for off := rg.FirstOffset; off <= rg.LastOffset; off++ {
						key := fmt.Sprintf("%s/%d", r.TopicPartition, off)
						if seen[key]++; seen[key] == 2 {
							duplicates++
						}
					}
				}
			},
		})
		if err != nil {
			return err
		}
		st.member = c.MemberID()
		wg.Go(func() {
			defer func() {
				closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				if err := c.Close(closeCtx); err != nil {
					errs <- fmt.Errorf("%s: close: %w", st.name, err)
				}
			}()
			for total.Load() < expected {
				if time.Since(time.Unix(0, lastProgress.Load())) > o.idle {
					errs <- fmt.Errorf("%s: no progress for %v", st.name, o.idle)
					cancel()
					return
				}
				// Processing a record would happen here; the records are
				// accepted by the next Poll.
				if _, err := c.Poll(ctx); err != nil {
					if !errors.Is(err, context.Canceled) {
						errs <- fmt.Errorf("%s: %w", st.name, err)
					}
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var errList []error
	for err := range errs {
		errList = append(errList, err)
	}

	var sum int64
	for _, st := range stats {
		n := st.accepted.Load()
		sum += n
		fmt.Fprintf(stdout, "%s (member %s): %d records\n", st.name, st.member, n)
	}
	fmt.Fprintf(stdout, "total: %d of %d records, %d accepted twice\n", sum, expected, duplicates)
	if sum != expected {
		errList = append(errList, fmt.Errorf("the consumers accepted %d records, want %d", sum, expected))
	}
	if duplicates > 0 {
		errList = append(errList, fmt.Errorf("%d records were accepted twice", duplicates))
	}
	return errors.Join(errList...)
}

// produce writes n keyless records (spread round-robin over the
// partitions) in batches.
func produce(ctx context.Context, logs sharelogv1.LogServiceClient, topic string, n int) error {
	const batch = 500
	for i := 0; i < n; i += batch {
		req := &sharelogv1.ProduceRequest{Topic: topic}
		for j := i; j < min(i+batch, n); j++ {
			req.Records = append(req.Records, &sharelogv1.Record{Value: fmt.Appendf(nil, "record-%d", j)})
		}
		if _, err := logs.Produce(ctx, req); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}
