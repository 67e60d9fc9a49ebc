package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sharelog/sharelog/client/shareconsumer"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// Progress display of consume and produce (variables so that tests can change
// them; they are only changed by tests that do not run in parallel).
var (
	progressInterval = time.Second
	// isTerminal reports whether w is a terminal (a character device).
	isTerminal = func(w io.Writer) bool { return isCharDevice(w) }
)

// isCharDevice reports whether v is a file that is a character device (a terminal).
func isCharDevice(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

type consumeOptions struct {
	group           string
	maxRecords      int
	ack             string
	count           int
	print           bool
	idleTimeout     time.Duration
	autoOffsetReset string
	fromBeginning   bool
	memberID        string
	maxWait         time.Duration
}

func (a *app) consumeCmd() *cobra.Command {
	var o consumeOptions
	cmd := &cobra.Command{
		Use:   "consume --group GROUP TOPIC...",
		Short: "Consume records as a member of a share group",
		Long: `Consume records of one or more topics as a member of a share group (Kafka KIP-932
"queues"): the consumers of a group share the partitions, each record is locked for one
consumer at a time and acknowledged — with --ack accept (the default), release (delivered
again, to any member) or reject (never delivered again).

It exits after --count records (extra records fetched are released for the others), after
--idle-timeout without records, or on Ctrl-C, closing its share session and leaving the
group. It fails at once (exit 1, no summary) when the server cannot be reached within
--timeout (UNAVAILABLE) or a topic does not exist (UNKNOWN_TOPIC_OR_PARTITION); once it has
started, it retries a lost connection until one of the ends above. On a terminal it shows progress (records/s and total) and ends with a summary line;
otherwise it prints the summary alone. With --print each record is printed to stdout as
"topic<TAB>partition<TAB>offset<TAB>key<TAB>value" (with -o json, one JSON object per record,
bytes in base64, delivery count included) and the summary goes to stderr.

A new group starts each partition at its latest offset (Kafka's share.auto.offset.reset
default), so it skips the records already there; consume then says so on stderr ("hint: ...").
--from-beginning makes a new group start at the log start offset: when the group has no share
state yet it sets the group's auto_offset_reset to earliest before joining; a group that
already has share state resumes where it is, unchanged, and consume says so on stderr (to
re-read, reset its offsets: sharelogctl share-groups reset-offsets GROUP --to-earliest
--all-topics --execute, with no member active). --auto-offset-reset sets the group's
auto_offset_reset first, whatever its state (it affects only partitions the group has not
consumed yet).`,
		Example: `  sharelogctl consume --group billing orders --from-beginning
  sharelogctl consume --group billing orders --count 100 --print
  sharelogctl consume --group billing orders --auto-offset-reset earliest --idle-timeout 5s
  sharelogctl consume --group retry-test orders --ack release --count 10 --print`,
		Args: cobra.MinimumNArgs(1),
	}
	f := cmd.Flags()
	f.StringVarP(&o.group, "group", "g", "", "share group to consume as (required)")
	f.IntVar(&o.maxRecords, "max-records", shareconsumer.DefaultMaxRecords, "records per fetch, at most")
	f.StringVar(&o.ack, "ack", "accept", "how to acknowledge each record: accept, release or reject")
	f.IntVar(&o.count, "count", 0, "exit after this many records (0 = no limit)")
	f.BoolVar(&o.print, "print", false, "print each record")
	f.DurationVar(&o.idleTimeout, "idle-timeout", 0, "exit after this long without a record (0 = wait forever)")
	f.StringVar(&o.autoOffsetReset, "auto-offset-reset", "", `set the group's auto_offset_reset first: "earliest", "latest" or "by_duration:<ISO-8601>"`)
	f.BoolVar(&o.fromBeginning, "from-beginning", false, "a new group starts at the log start offset (sets its auto_offset_reset to earliest if it has no share state)")
	f.StringVar(&o.memberID, "member-id", "", "member ID (default: a random UUID)")
	f.DurationVar(&o.maxWait, "max-wait", shareconsumer.DefaultMaxWait, "how long one fetch waits for records on the server")
	_ = cmd.MarkFlagRequired("group")
	cmd.MarkFlagsMutuallyExclusive("from-beginning", "auto-offset-reset")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		switch {
		case o.maxRecords < 1:
			return fmt.Errorf("invalid --max-records %d: must be >= 1", o.maxRecords)
		case o.count < 0:
			return fmt.Errorf("invalid --count %d: must be >= 0", o.count)
		case o.idleTimeout < 0:
			return fmt.Errorf("invalid --idle-timeout %v: must be >= 0", o.idleTimeout)
		case o.maxWait < 0:
			return fmt.Errorf("invalid --max-wait %v: must be >= 0", o.maxWait)
		}
		ackType, err := shareconsumer.ParseAckType(o.ack)
		if err != nil || ackType == shareconsumer.Renew {
			return fmt.Errorf("invalid --ack %q: want accept, release or reject", o.ack)
		}
		return a.consume(cmd.Context(), args, o, ackType)
	})
	return cmd
}

// consumeStats is what consume reports.
type consumeStats struct {
	consumed   atomic.Int64 // records acknowledged with --ack
	ackFailed  atomic.Int64 // offsets whose acknowledgement was not applied
	firstError atomic.Value // string: the first acknowledgement error
}

func (a *app) consume(ctx context.Context, topics []string, o consumeOptions, ackType shareconsumer.AckType) error {
	// Dials a.conn. The consumer retries an unreachable server and waits for the partitions of a
	// missing topic until interrupted; a command must fail instead.
	described, err := a.describeTopics(ctx, topics...)
	if err != nil {
		return err
	}
	if o.fromBeginning || o.autoOffsetReset == "" {
		if o.autoOffsetReset, err = a.startHint(ctx, o.group, described, o.fromBeginning); err != nil {
			return err
		}
	}
	if o.autoOffsetReset != "" {
		callCtx, cancel := a.callCtx(ctx)
		_, err := sharelogv1.NewShareGroupServiceClient(a.conn).UpdateShareGroupConfig(callCtx, &sharelogv1.UpdateShareGroupConfigRequest{
			GroupId: o.group,
			Config:  &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String(o.autoOffsetReset)},
		})
		cancel()
		if err != nil {
			return fmt.Errorf("setting auto_offset_reset: %w", err)
		}
	}

	var stats consumeStats
	level := slog.LevelWarn
	if a.verbose {
		level = slog.LevelInfo
	}
	maxRecords := o.maxRecords
	if o.count > 0 {
		maxRecords = min(maxRecords, o.count)
	}
	maxWait := o.maxWait
	if maxWait == 0 {
		maxWait = -1 // no long poll
	}
	c, err := shareconsumer.New(a.conn, shareconsumer.Config{
		GroupID:    o.group,
		MemberID:   o.memberID,
		Topics:     topics,
		ClientID:   "sharelogctl",
		MaxRecords: maxRecords,
		MaxWait:    maxWait,
		AckMode:    shareconsumer.AckExplicit,
		// In a partitioned cluster: a session on each partition's owner.
		Dial: func(addr string) (grpc.ClientConnInterface, error) { return a.dialAddr(addr) },
		// --timeout bounds each request beyond its long poll.
		RequestTimeout: a.timeout,
		Logger:         slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level})),
		OnAcknowledgement: func(r shareconsumer.AckResult) {
			if r.Err == nil {
				return
			}
			var n int64
			for _, rg := range r.Ranges {
				n += rg.Len()
			}
			stats.ackFailed.Add(n)
			stats.firstError.CompareAndSwap(nil, r.Err.Error())
		},
	})
	if err != nil {
		return err
	}

	out := bufio.NewWriter(a.stdout)
	progress := !o.print && isTerminal(a.stdout)
	var stopProgress func()
	start := time.Now()
	if progress {
		stopProgress = a.showProgress(&stats, start)
	}
	idleEnd, loopErr := a.consumeLoop(ctx, c, out, o, ackType, &stats)
	elapsed := time.Since(start) // the run's wall time, the final --idle-timeout included
	active := elapsed            // the rate's: up to the last record when --idle-timeout ended it
	if !idleEnd.IsZero() && idleEnd.After(start) && stats.consumed.Load() > 0 {
		active = idleEnd.Sub(start)
	}

	closeTimeout := a.timeout
	if closeTimeout <= 0 {
		closeTimeout = shareconsumer.DefaultCloseTimeout
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	closeErr := c.Close(closeCtx)
	cancel()
	if stopProgress != nil {
		stopProgress()
	}
	if err := out.Flush(); err != nil && loopErr == nil {
		loopErr = err
	}
	if err := errors.Join(loopErr, closeErr); err != nil {
		return err
	}
	return a.consumeSummary(o, ackType, &stats, elapsed, active)
}

// startHint looks at the group's share state and config before it joins. With fromBeginning
// it returns "earliest" (the auto_offset_reset to set) for a group without share state, and
// for one with state says on stderr that nothing changes. Without it, for a new group whose
// auto_offset_reset is latest over partitions that already hold records, it says on stderr
// that those records are skipped and how not to skip them. A failure to look (an older
// server, no DESCRIBE permission on the group) is no error: no hint then.
func (a *app) startHint(ctx context.Context, group string, topics []*sharelogv1.Topic, fromBeginning bool) (string, error) {
	client := sharelogv1.NewShareGroupServiceClient(a.conn)
	callCtx, cancel := a.callCtx(ctx)
	offs, err := client.DescribeShareGroupOffsets(callCtx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: group})
	cancel()
	hasState := false
	if status.Code(err) == codes.NotFound {
		err = nil // no such group yet: no state
	}
	if err == nil {
		for _, t := range offs.GetTopics() {
			for _, p := range t.GetPartitions() {
				hasState = hasState || p.GetStartOffset() >= 0
			}
		}
	}
	if fromBeginning {
		if err != nil {
			return "", fmt.Errorf("--from-beginning: looking at the group's share state: %w", err)
		}
		if hasState {
			fmt.Fprintf(a.stderr, "note: share group %s already has share state: it resumes where it is and --from-beginning changes nothing "+
				"(to re-read from the start: sharelogctl share-groups reset-offsets %s --to-earliest --all-topics --execute, with no member active)\n", group, group)
			return "", nil
		}
		return "earliest", nil
	}
	if err != nil || hasState {
		return "", nil
	}
	callCtx, cancel = a.callCtx(ctx)
	cfg, err := client.GetShareGroupConfig(callCtx, &sharelogv1.GetShareGroupConfigRequest{GroupId: group})
	cancel()
	switch {
	case status.Code(err) == codes.NotFound:
		// No such group yet: it will start with the default, latest.
	case err != nil || cfg.GetConfig().GetAutoOffsetReset() != "latest":
		return "", nil
	}
	var skipped int64
	for _, t := range topics {
		for _, p := range t.GetPartitions() {
			skipped += max(p.GetHighWatermark()-p.GetLogStartOffset(), 0)
		}
	}
	if skipped > 0 {
		fmt.Fprintf(a.stderr, "hint: share group %s is new and starts at the latest offset: the %s already in %s are not delivered to it; "+
			"use --from-beginning to read them\n", group, plural(int(skipped), "record", "records"), strings.Join(topicNames(topics), ", "))
	}
	return "", nil
}

func topicNames(topics []*sharelogv1.Topic) []string {
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.GetName()
	}
	return names
}

// consumeLoop polls and acknowledges until --count, --idle-timeout (then it
// returns when the last record came), Ctrl-C or an error.
func (a *app) consumeLoop(ctx context.Context, c *shareconsumer.Consumer, out *bufio.Writer, o consumeOptions, ackType shareconsumer.AckType, stats *consumeStats) (idleEnd time.Time, err error) {
	lastRecord := time.Now()
	for o.count == 0 || stats.consumed.Load() < int64(o.count) {
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if o.idleTimeout > 0 {
			pollCtx, cancel = context.WithDeadline(ctx, lastRecord.Add(o.idleTimeout))
		}
		recs, err := c.Poll(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return time.Time{}, nil // interrupted: a normal end
		}
		idle := o.idleTimeout > 0 && time.Since(lastRecord) >= o.idleTimeout
		if idle && (len(recs) == 0 || err != nil) {
			return lastRecord, nil
		}
		if err != nil {
			return time.Time{}, err
		}
		if len(recs) > 0 {
			lastRecord = time.Now()
		}
		for _, r := range recs {
			if o.count > 0 && stats.consumed.Load() >= int64(o.count) {
				_ = c.Acknowledge(r, shareconsumer.Release) // for the other members
				continue
			}
			if o.print {
				if err := a.printShareRecord(out, r); err != nil {
					return time.Time{}, err
				}
			}
			if err := c.Acknowledge(r, ackType); err != nil {
				// The lock expired or the session ended: the record will be
				// delivered again.
				stats.ackFailed.Add(1)
				stats.firstError.CompareAndSwap(nil, err.Error())
				continue
			}
			stats.consumed.Add(1)
		}
		if o.print {
			if err := out.Flush(); err != nil {
				return time.Time{}, err
			}
		}
	}
	return time.Time{}, nil
}

// showProgress rewrites one status line on stdout (a terminal) every
// progressInterval; the returned function stops it.
func (a *app) showProgress(stats *consumeStats, start time.Time) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		last, lastAt := int64(0), start
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				n := stats.consumed.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				fmt.Fprintf(a.stdout, "\r\033[Kconsumed %d records, %.1f records/s", n, rate)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		fmt.Fprint(a.stdout, "\r\033[K")
	}
}

// consumeSummary prints the summary line: elapsed is the run's wall time, active the time the
// rate is computed over (up to the last record when --idle-timeout ended the run).
func (a *app) consumeSummary(o consumeOptions, ackType shareconsumer.AckType, stats *consumeStats, elapsed, active time.Duration) error {
	n := stats.consumed.Load()
	rate := 0.0
	if s := active.Seconds(); s > 0 {
		rate = float64(n) / s
	}
	failed := stats.ackFailed.Load()
	summaryTo := a.stdout
	if o.print {
		summaryTo = a.stderr // stdout holds the records
	}
	if a.jsonOutput() && !o.print {
		b, err := json.Marshal(map[string]any{
			"group": o.group, "records": n, "acknowledge": ackType.String(),
			"seconds": elapsed.Seconds(), "recordsPerSecond": rate, "acknowledgementsFailed": failed,
		})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(summaryTo, "%s\n", b)
		return err
	}
	line := fmt.Sprintf("consumed %s from group %s in %s (%.1f records/s), acknowledged as %s",
		plural(int(n), "record", "records"), o.group, elapsed.Round(time.Millisecond), rate, ackType)
	if failed > 0 {
		first, _ := stats.firstError.Load().(string)
		line += fmt.Sprintf("; %s not applied, to be delivered again (%s)", plural(int(failed), "acknowledgement", "acknowledgements"), first)
	}
	_, err := fmt.Fprintln(summaryTo, line)
	return err
}

type jsonShareRecord struct {
	Topic         string       `json:"topic"`
	Partition     int32        `json:"partition"`
	Offset        string       `json:"offset"`
	Timestamp     string       `json:"timestamp"`
	Key           []byte       `json:"key"`
	Value         []byte       `json:"value"`
	Headers       []jsonHeader `json:"headers"`
	DeliveryCount int32        `json:"deliveryCount"`
}

type jsonHeader struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

func (a *app) printShareRecord(out *bufio.Writer, r shareconsumer.Record) error {
	if a.jsonOutput() {
		jr := jsonShareRecord{
			Topic: r.Topic, Partition: r.Partition, Offset: strconv.FormatInt(r.Offset, 10),
			Timestamp: strconv.FormatInt(r.Timestamp.UnixMilli(), 10), Key: r.Key, Value: r.Value,
			Headers: []jsonHeader{}, DeliveryCount: r.DeliveryCount,
		}
		for _, h := range r.Headers {
			jr.Headers = append(jr.Headers, jsonHeader(h))
		}
		b, err := json.Marshal(jr)
		if err != nil {
			return err
		}
		out.Write(b)
		return out.WriteByte('\n')
	}
	out.WriteString(r.Topic)
	out.WriteByte('\t')
	out.WriteString(strconv.FormatInt(int64(r.Partition), 10))
	out.WriteByte('\t')
	out.WriteString(strconv.FormatInt(r.Offset, 10))
	out.WriteByte('\t')
	out.Write(r.Key)
	out.WriteByte('\t')
	out.Write(r.Value)
	return out.WriteByte('\n')
}
