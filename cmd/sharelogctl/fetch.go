package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// followWait is how long one Fetch waits at the high watermark with --follow.
const followWait = time.Second

type fetchOptions struct {
	partition      int32
	offset         int64
	fromBeginning  bool
	maxRecords     int
	follow         bool
	printHeaders   bool
	printTimestamp bool
	nullValue      string
	isolation      string
}

func (a *app) fetchCmd() *cobra.Command {
	var o fetchOptions
	cmd := &cobra.Command{
		Use:   "fetch TOPIC",
		Short: "Print the records of a topic (every partition, or one)",
		Long: `Print the records of every partition of a topic (as rpk topic consume does), or of one
with --partition, one line each: "offset<TAB>key<TAB>value" (--print-timestamp adds the
timestamp in ms after the offset, --print-headers adds "k=v,k=v" before the key). A missing key
prints empty; a missing value (a tombstone) prints --null-value. With -o json each record is
printed as a protojson object.

Output order: without --partition on a topic of several partitions, each line starts with a
partition column ("partition<TAB>offset<TAB>key<TAB>value"; with -o json each object gains a
"partition" field), and the partitions are printed one after the other, in partition order,
each in offset order. --max-records counts records over all of them. With --follow the
partitions are read at once and the lines of different partitions interleave in arrival order
(each partition's still in offset order). On a topic of one partition, or with --partition, the
lines have no partition column.

Each partition starts at --offset, or at its log start offset (the earliest readable record).
Reading every partition, a partition whose high watermark is at or below --offset prints
nothing (with --follow it prints its records from --offset on once they exist). Without
--follow it stops at the high watermark seen by the partition's first fetch; with --follow it
waits for new records until interrupted (Ctrl-C exits with status 0).

--isolation-level read_committed prints a Kafka transactional producer's committed records
only (not those of open or aborted transactions) and stops at the last stable offset instead
of the high watermark.`,
		Example: `  sharelogctl fetch orders
  sharelogctl fetch orders --partition 2 --offset 100 --max-records 10
  sharelogctl fetch orders --follow --print-timestamp
  sharelogctl fetch payments --isolation-level read_committed`,
		Args: cobra.ExactArgs(1),
	}
	f := cmd.Flags()
	f.Int32VarP(&o.partition, "partition", "p", 0, "partition to read (default: every partition)")
	f.Int64Var(&o.offset, "offset", 0, "first offset to read in each partition (default: the log start offset)")
	f.BoolVar(&o.fromBeginning, "from-beginning", false, "start at the log start offset (the default)")
	f.IntVar(&o.maxRecords, "max-records", 0, "stop after this many records (0 = no limit)")
	f.BoolVarP(&o.follow, "follow", "f", false, "keep waiting for new records until interrupted")
	f.BoolVar(&o.printHeaders, "print-headers", false, `print the headers as "k=v,k=v" before the key`)
	f.BoolVar(&o.printTimestamp, "print-timestamp", false, "print the timestamp (ms since the epoch) after the offset")
	f.StringVar(&o.nullValue, "null-value", "", "what to print for an absent value (a tombstone)")
	f.StringVar(&o.isolation, "isolation-level", "read_uncommitted", "read_uncommitted (every record) or read_committed (committed transactions only)")
	cmd.MarkFlagsMutuallyExclusive("offset", "from-beginning")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		if o.maxRecords < 0 {
			return fmt.Errorf("invalid --max-records %d: must be >= 0", o.maxRecords)
		}
		if o.isolation != "read_uncommitted" && o.isolation != "read_committed" {
			return fmt.Errorf("invalid --isolation-level %q: must be read_uncommitted or read_committed", o.isolation)
		}
		if cmd.Flags().Changed("offset") && o.offset < 0 {
			return fmt.Errorf("invalid --offset %d: must be >= 0", o.offset)
		}
		client, err := a.logClient()
		if err != nil {
			return err
		}
		haveOffset := cmd.Flags().Changed("offset")
		if cmd.Flags().Changed("partition") {
			err = a.fetch(cmd.Context(), client, args[0], o, haveOffset)
		} else {
			err = a.fetchAll(cmd.Context(), client, args[0], o, haveOffset)
		}
		if o.follow && cmd.Context().Err() != nil {
			return nil // interrupted: the normal end of --follow
		}
		return err
	})
	return cmd
}

// errEnough ends the reads once --max-records records are printed.
var errEnough = errors.New("max records printed")

// recordSink prints the records of one or more partitions; with --follow over several
// partitions it is called from one goroutine per partition, so it locks.
type recordSink struct {
	a       *app
	o       fetchOptions
	tagged  bool // print the partition of each record (reading several)
	mu      sync.Mutex
	out     *bufio.Writer
	printed int
}

// print prints rec of partition p; errEnough once --max-records are printed.
func (s *recordSink) print(p int32, rec *sharelogv1.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.o.maxRecords > 0 && s.printed >= s.o.maxRecords {
		return errEnough
	}
	if err := s.a.printRecord(s.out, p, rec, s.o, s.tagged); err != nil {
		return err
	}
	s.printed++
	if s.o.maxRecords > 0 && s.printed >= s.o.maxRecords {
		return errEnough
	}
	return nil
}

// remaining is how many records may still be printed (0 = no limit).
func (s *recordSink) remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.o.maxRecords == 0 {
		return 0
	}
	return max(s.o.maxRecords-s.printed, 1)
}

func (s *recordSink) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Flush()
}

// fetch prints the records of partition o.partition.
func (a *app) fetch(ctx context.Context, client sharelogv1.LogServiceClient, topic string, o fetchOptions, haveOffset bool) error {
	sink := &recordSink{a: a, o: o, out: bufio.NewWriter(a.stdout)}
	defer sink.flush()
	err := a.fetchPartition(ctx, client, topic, o.partition, o, haveOffset, -1, sink)
	if errors.Is(err, errEnough) {
		return nil
	}
	return err
}

// fetchAll prints the records of every partition of topic: one partition after the other in
// partition order, or, with --follow, all at once.
func (a *app) fetchAll(ctx context.Context, client sharelogv1.LogServiceClient, topic string, o fetchOptions, haveOffset bool) error {
	topics, err := a.describeTopics(ctx, topic)
	if err != nil {
		return err
	}
	parts := topics[0].GetPartitions()
	sink := &recordSink{a: a, o: o, tagged: len(parts) > 1, out: bufio.NewWriter(a.stdout)}
	defer sink.flush()
	if len(parts) == 1 {
		// One partition: exactly what --partition 0 does, errors included.
		err := a.fetchPartition(ctx, client, topic, parts[0].GetPartition(), o, haveOffset, -1, sink)
		if errors.Is(err, errEnough) {
			return nil
		}
		return err
	}
	// With --offset, a partition that has not reached it yet prints nothing now (and, with
	// --follow, starts at its high watermark, printing from --offset on).
	startOf := func(tp *sharelogv1.TopicPartition) (start int64, skip bool) {
		if !haveOffset || o.offset <= tp.GetHighWatermark() {
			return o.offset, false
		}
		return tp.GetHighWatermark(), !o.follow
	}
	if !o.follow {
		for _, tp := range parts {
			start, skip := startOf(tp)
			if skip {
				continue
			}
			po := o
			po.offset = start
			err := a.fetchPartition(ctx, client, topic, tp.GetPartition(), po, haveOffset, o.offset, sink)
			if errors.Is(err, errEnough) {
				return nil
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(parts))
	for _, tp := range parts {
		start, _ := startOf(tp)
		po := o
		po.offset = start
		go func() {
			errs <- a.fetchPartition(ctx, client, topic, tp.GetPartition(), po, haveOffset, o.offset, sink)
		}()
	}
	var first error
	for range parts {
		err := <-errs
		if first == nil && err != nil {
			first = err
			cancel() // one partition failed or --max-records is reached: stop the others
		}
	}
	if errors.Is(first, errEnough) {
		return nil
	}
	return first
}

// fetchPartition prints the records of one partition from o.offset (or its log start without
// haveOffset) to the high watermark of its first fetch, or on with --follow; records below
// minOffset (>= 0) are not printed.
func (a *app) fetchPartition(ctx context.Context, client sharelogv1.LogServiceClient, topic string, partition int32, o fetchOptions, haveOffset bool, minOffset int64, sink *recordSink) error {
	offset := o.offset
	if !haveOffset {
		callCtx, cancel := a.callCtx(ctx)
		resp, err := client.ListOffsets(callCtx, &sharelogv1.ListOffsetsRequest{
			Topic:     topic,
			Partition: partition,
			Spec:      sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST,
		})
		cancel()
		if err != nil {
			return err
		}
		offset = resp.GetOffset()
	}

	var maxWait time.Duration
	if o.follow {
		maxWait = followWait
		if a.timeout > 0 && maxWait > a.timeout/2 {
			maxWait = a.timeout / 2 // leave the long poll time to answer within --timeout
		}
	}
	end := int64(-1) // without --follow: the high watermark of the first fetch
	for {
		req := &sharelogv1.FetchRequest{
			Topic:     topic,
			Partition: partition,
			Offset:    offset,
			MaxWaitMs: int32(maxWait / time.Millisecond),
		}
		if o.isolation == "read_committed" {
			req.IsolationLevel = sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
		}
		if n := sink.remaining(); n > 0 {
			req.MaxRecords = int32(min(n, 10000))
		}
		callCtx, cancel := a.callCtx(ctx)
		resp, err := client.Fetch(callCtx, req)
		cancel()
		if err != nil {
			return err
		}
		if !o.follow && end < 0 {
			end = resp.GetHighWatermark()
			if resp.LastStableOffset != nil {
				end = resp.GetLastStableOffset()
			}
		}
		for _, rec := range resp.GetRecords() {
			if !o.follow && rec.GetOffset() >= end {
				return nil
			}
			offset = rec.GetOffset() + 1
			if rec.GetOffset() < minOffset {
				continue
			}
			if err := sink.print(partition, rec); err != nil {
				return err
			}
		}
		if err := sink.flush(); err != nil {
			return err
		}
		if !o.follow && (offset >= end || len(resp.GetRecords()) == 0) {
			return nil
		}
	}
}

// printRecord prints rec of partition p, with its partition when tagged.
func (a *app) printRecord(out *bufio.Writer, p int32, rec *sharelogv1.Record, o fetchOptions, tagged bool) error {
	if a.jsonOutput() {
		if err := out.Flush(); err != nil {
			return err
		}
		if !tagged {
			return a.printJSON(rec)
		}
		return a.printJSONWith(rec, "partition", strconv.FormatInt(int64(p), 10))
	}
	if tagged {
		out.WriteString(strconv.FormatInt(int64(p), 10))
		out.WriteByte('\t')
	}
	out.WriteString(strconv.FormatInt(rec.GetOffset(), 10))
	out.WriteByte('\t')
	if o.printTimestamp {
		out.WriteString(strconv.FormatInt(rec.GetTimestamp(), 10))
		out.WriteByte('\t')
	}
	if o.printHeaders {
		for i, h := range rec.GetHeaders() {
			if i > 0 {
				out.WriteByte(',')
			}
			out.WriteString(h.GetKey())
			out.WriteByte('=')
			out.Write(h.GetValue())
		}
		out.WriteByte('\t')
	}
	out.Write(rec.GetKey())
	out.WriteByte('\t')
	if rec.Value == nil {
		out.WriteString(o.nullValue)
	} else {
		out.Write(rec.GetValue())
	}
	return out.WriteByte('\n')
}
