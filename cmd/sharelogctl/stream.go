package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/client/changestream"
)

type streamOptions struct {
	from        int64
	prefix      string
	oso         bool
	materialize bool
	toEnd       bool
}

func (a *app) streamCmd() *cobra.Command {
	var o streamOptions
	cmd := &cobra.Command{
		Use:   "stream TOPIC PARTITION",
		Short: "Follow a partition's change stream (or print its final key/value state)",
		Long: `Follow one partition's change stream (StreamChanges) through the Go client library,
which resumes after failures and resets on rollbacks. Each event is one line:

  snapshot  START..END  DISK|MEMORY      an ordered snapshot opens
  oso-start / oso-end                     an out-of-sequence-order snapshot (--oso)
  mutation  OFFSET  KEY  VALUE
  deletion  OFFSET  KEY
  checkpoint  NEXT_OFFSET                 a consistent point
  reset  CAUSE                            the state derived so far is void

With -o json each event is a JSON object. --prefix keeps keys that start with
it. --to-end stops at the high watermark seen at start; --materialize implies it
and prints, instead of the events, the final state: one "KEY<TAB>VALUE" line per
live key, sorted by key (deleted keys are absent). Without an end it follows the
partition until interrupted (Ctrl-C exits with status 0).

It fails at once (exit 1) when the server cannot be reached within --timeout, or the topic
or partition does not exist; once started, it retries a lost connection by itself. Errors
print as "error: <message> (<REASON>)", a deleted topic as UNKNOWN_TOPIC_OR_PARTITION.`,
		Example: `  sharelogctl stream orders 0
  sharelogctl stream orders 0 --prefix eu/ --oso --to-end
  sharelogctl stream orders 0 --materialize`,
		Args: cobra.ExactArgs(2),
	}
	f := cmd.Flags()
	f.Int64Var(&o.from, "from", 0, "first offset wanted (0: everything retained)")
	f.StringVar(&o.prefix, "prefix", "", "only keys starting with this")
	f.BoolVar(&o.oso, "oso", false, "allow an out-of-sequence-order snapshot for a full backfill")
	f.BoolVar(&o.materialize, "materialize", false, "print the final key/value state up to the high watermark instead of events")
	f.BoolVar(&o.toEnd, "to-end", false, "stop at the high watermark seen at start")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		p, err := strconv.ParseInt(args[1], 10, 32)
		if err != nil || p < 0 {
			return fmt.Errorf("invalid partition %q: must be a non-negative integer", args[1])
		}
		if o.from < 0 {
			return fmt.Errorf("invalid --from %d: must be >= 0", o.from)
		}
		err = a.stream(cmd.Context(), args[0], int32(p), o)
		if cmd.Context().Err() != nil {
			return nil // interrupted: the normal end of a follow
		}
		return err
	})
	return cmd
}

func (a *app) stream(ctx context.Context, topic string, partition int32, o streamOptions) error {
	cfg := changestream.Config{Topic: topic, Partition: partition, KeyPrefix: []byte(o.prefix), OSO: changestream.OSOOff}
	if o.oso {
		cfg.OSO = changestream.OSOWithOffsetAdvanced
	}
	if o.from > 0 {
		cfg.From = &changestream.Checkpoint{Partition: partition, NextOffset: o.from}
	}
	// The library retries an unreachable server until interrupted: check the server, the topic
	// and the partition first, bounded by --timeout.
	topics, err := a.describeTopics(ctx, topic)
	if err != nil {
		return err
	}
	t := topics[0]
	if int(partition) >= len(t.GetPartitions()) {
		return reasonError(codes.NotFound, apierr.UnknownTopicOrPartition, "topic %q has no partition %d", topic, partition)
	}
	if o.toEnd || o.materialize {
		hw := t.GetPartitions()[partition].GetHighWatermark()
		cfg.EndOffset = &hw
		if cfg.From != nil && o.from > hw {
			return reasonError(codes.OutOfRange, apierr.OffsetOutOfRange, "--from %d is above the high watermark %d", o.from, hw)
		}
	}
	out := bufio.NewWriter(a.stdout)
	defer out.Flush()
	h := &streamPrinter{out: out, json: a.jsonOutput(), materialize: o.materialize, state: map[string][]byte{}, lastCheckpoint: -1}
	st, err := changestream.New(a.conn, cfg, h)
	if err != nil {
		return err
	}
	if err := st.Run(ctx); err != nil {
		return streamError(err, topic, partition)
	}
	if o.materialize {
		return h.printState()
	}
	return nil
}

// streamError gives the errors the change-stream library raises itself the reason the server
// uses for the same condition, so that they print as "error: <message> (<REASON>)" too.
func streamError(err error, topic string, partition int32) error {
	if errors.Is(err, changestream.ErrTopicDeleted) {
		return reasonError(codes.NotFound, apierr.UnknownTopicOrPartition, "topic %q was deleted", topic)
	}
	// The library checks the partition count itself (when it resets, for instance) and answers
	// a bare NOT_FOUND.
	if st, ok := status.FromError(err); ok && st.Code() == codes.NotFound && errorInfo(st) == nil {
		return reasonError(codes.NotFound, apierr.UnknownTopicOrPartition, "%s", st.Message())
	}
	return err
}

// streamPrinter prints events, or keeps the state for --materialize.
type streamPrinter struct {
	out         *bufio.Writer
	json        bool
	materialize bool
	state       map[string][]byte
	// lastCheckpoint is the checkpoint printed last if no other event came after it, else -1:
	// the library reports the end of the last snapshot and then stream_end at the same offset,
	// and the same point is printed once.
	lastCheckpoint int64
}

func (p *streamPrinter) line(fields map[string]any, text ...string) error {
	if p.materialize {
		return nil
	}
	p.lastCheckpoint = -1
	if p.json {
		b, err := json.Marshal(fields)
		if err != nil {
			return err
		}
		p.out.Write(b)
		return p.out.WriteByte('\n')
	}
	for i, f := range text {
		if i > 0 {
			p.out.WriteByte('\t')
		}
		p.out.WriteString(f)
	}
	return p.out.WriteByte('\n')
}

func (p *streamPrinter) OnSnapshot(_ context.Context, s changestream.Snapshot) error {
	switch s.Kind {
	case changestream.OSOStart:
		return p.line(map[string]any{"event": "oso-start"}, "oso-start")
	case changestream.OSOEnd:
		return p.line(map[string]any{"event": "oso-end"}, "oso-end")
	}
	src := "DISK"
	if s.Source == changestream.SourceMemory {
		src = "MEMORY"
	}
	return p.line(map[string]any{"event": "snapshot", "start": strconv.FormatInt(s.Start, 10), "end": strconv.FormatInt(s.End, 10), "source": src},
		"snapshot", fmt.Sprintf("%d..%d", s.Start, s.End), src)
}

func (p *streamPrinter) OnMutation(_ context.Context, m changestream.Mutation) error {
	p.state[string(m.Key)] = m.Value
	return p.line(map[string]any{"event": "mutation", "offset": strconv.FormatInt(m.Offset, 10), "key": string(m.Key), "value": string(m.Value)},
		"mutation", strconv.FormatInt(m.Offset, 10), string(m.Key), string(m.Value))
}

func (p *streamPrinter) OnDeletion(_ context.Context, d changestream.Deletion) error {
	delete(p.state, string(d.Key))
	return p.line(map[string]any{"event": "deletion", "offset": strconv.FormatInt(d.Offset, 10), "key": string(d.Key)},
		"deletion", strconv.FormatInt(d.Offset, 10), string(d.Key))
}

func (p *streamPrinter) OnReset(_ context.Context, r changestream.Reset) error {
	clear(p.state)
	return p.line(map[string]any{"event": "reset", "cause": r.Cause.String()}, "reset", r.Cause.String())
}

func (p *streamPrinter) OnCheckpoint(_ context.Context, c changestream.Checkpoint) error {
	if c.NextOffset == p.lastCheckpoint {
		return nil
	}
	if err := p.line(map[string]any{"event": "checkpoint", "next_offset": strconv.FormatInt(c.NextOffset, 10)},
		"checkpoint", strconv.FormatInt(c.NextOffset, 10)); err != nil {
		return err
	}
	p.lastCheckpoint = c.NextOffset
	return p.out.Flush()
}

func (p *streamPrinter) printState() error {
	keys := make([]string, 0, len(p.state))
	for k := range p.state {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if p.json {
			b, err := json.Marshal(map[string]string{"key": k, "value": string(p.state[k])})
			if err != nil {
				return err
			}
			p.out.Write(b)
			p.out.WriteByte('\n')
			continue
		}
		fmt.Fprintf(p.out, "%s\t%s\n", k, p.state[k])
	}
	return nil
}
