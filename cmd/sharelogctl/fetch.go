package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
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
		Short: "Print the records of a partition",
		Long: `Print the records of one partition, one line each: "offset<TAB>key<TAB>value"
(--print-timestamp adds the timestamp in ms after the offset, --print-headers adds
"k=v,k=v" before the key). A missing key prints empty; a missing value (a tombstone) prints
--null-value. With -o json each record is printed as a protojson object.

It starts at --offset, or at the log start offset (the earliest readable record). Without
--follow it stops at the high watermark seen by its first fetch; with --follow it waits for
new records until interrupted (Ctrl-C exits with status 0).

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
	f.Int32VarP(&o.partition, "partition", "p", 0, "partition to read")
	f.Int64Var(&o.offset, "offset", 0, "first offset to read (default: the log start offset)")
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
		err = a.fetch(cmd.Context(), client, args[0], o, cmd.Flags().Changed("offset"))
		if o.follow && cmd.Context().Err() != nil {
			return nil // interrupted: the normal end of --follow
		}
		return err
	})
	return cmd
}

func (a *app) fetch(ctx context.Context, client sharelogv1.LogServiceClient, topic string, o fetchOptions, haveOffset bool) error {
	out := bufio.NewWriter(a.stdout)
	defer out.Flush()

	offset := o.offset
	if !haveOffset {
		callCtx, cancel := a.callCtx(ctx)
		resp, err := client.ListOffsets(callCtx, &sharelogv1.ListOffsetsRequest{
			Topic:     topic,
			Partition: o.partition,
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
	printed := 0
	for {
		req := &sharelogv1.FetchRequest{
			Topic:     topic,
			Partition: o.partition,
			Offset:    offset,
			MaxWaitMs: int32(maxWait / time.Millisecond),
		}
		if o.isolation == "read_committed" {
			req.IsolationLevel = sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
		}
		if o.maxRecords > 0 {
			req.MaxRecords = int32(min(o.maxRecords-printed, 10000))
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
			if err := a.printRecord(out, rec, o); err != nil {
				return err
			}
			offset = rec.GetOffset() + 1
			printed++
			if o.maxRecords > 0 && printed >= o.maxRecords {
				return nil
			}
		}
		if err := out.Flush(); err != nil {
			return err
		}
		if !o.follow && (offset >= end || len(resp.GetRecords()) == 0) {
			return nil
		}
	}
}

func (a *app) printRecord(out *bufio.Writer, rec *sharelogv1.Record, o fetchOptions) error {
	if a.jsonOutput() {
		if err := out.Flush(); err != nil {
			return err
		}
		return a.printJSON(rec)
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
