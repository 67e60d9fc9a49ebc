package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sharelog/sharelog/client/router"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// maxBatchBytes sends a batch early when its keys and values reach this size, well below the
// server's default --max-request-bytes (16 MiB).
const maxBatchBytes = 4 << 20

func (a *app) produceCmd() *cobra.Command {
	var (
		partition int32
		separator string
		batchSize int
		nullValue string
		progress  bool
		retryFor  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce records read from stdin, one per line",
		Long: `Produce one record per line of stdin. A line containing the key separator (TAB by
default) is "key<SEP>value", split at the first separator; any other line is a value without
key. Keys and values are the raw bytes of the line (the trailing "\n" or "\r\n" removed).
An empty --key-separator disables keys.

Without --partition the server routes each record by key (murmur2, as Kafka) and spreads
keyless records round-robin. Records are sent in batches of --batch; a batch is also sent as
soon as no more input is waiting, so interactive use sends each line as it is typed.
At the end it prints "produced N records to TOPIC in DURATION" (on stderr with -o json, which
prints each ProduceResponse on stdout); --verbose also prints "partition=P offset=O" for each
record. When stderr is a terminal (and stdin is not), or with --progress, it reports progress
on stderr about once a second: "produced N records to TOPIC so far (R records/s)", rewritten
in place on a terminal, one line each otherwise.

It is an idempotent producer (docs/produce.md): it takes a producer id from the server and
resends a batch whose outcome is unknown (a lost connection, a deadline, an instance failing
over) for up to --retry-timeout; the server stores each record once. Keyless records without
--partition are spread round-robin by the command itself, so that a resend goes to the same
partition. When some partitions of a batch fail, the others' records stay stored: the command
stops with an error naming the failed partitions (exit status non-zero).`,
		Example: `  printf 'user-1\tcreated\nhello\n' | sharelogctl produce orders
  sharelogctl produce orders --partition 2 --key-separator ':' < records.txt
  echo 'user-1:__null__' | sharelogctl produce users --key-separator ':' --null-value __null__`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().Int32VarP(&partition, "partition", "p", 0, "partition to write to (default: routed by key)")
	cmd.Flags().StringVar(&separator, "key-separator", "\t", "separator between key and value; empty = no keys")
	cmd.Flags().IntVar(&batchSize, "batch", 100, "records per Produce call")
	cmd.Flags().StringVar(&nullValue, "null-value", "", "a value equal to this string is sent as absent (a tombstone)")
	cmd.Flags().BoolVar(&progress, "progress", false, "report progress on stderr even when it is not a terminal")
	cmd.Flags().DurationVar(&retryFor, "retry-timeout", 2*time.Minute, "how long a batch is resent while its outcome is unknown or its partition answers a retriable error")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		if batchSize < 1 {
			return fmt.Errorf("invalid --batch %d: must be >= 1", batchSize)
		}
		if retryFor <= 0 {
			return fmt.Errorf("invalid --retry-timeout %v: must be > 0", retryFor)
		}
		var tombstone *string
		if cmd.Flags().Changed("null-value") {
			tombstone = &nullValue
		}
		p := &producer{app: a, topic: args[0], batchSize: batchSize, start: time.Now(), retryFor: retryFor}
		p.lastProgress = p.start
		switch {
		case isTerminal(a.stderr) && !isCharDevice(a.stdin):
			// Not when the lines are typed: the progress line would mix with them.
			p.progress = progressInPlace
		case progress:
			p.progress = progressLines
		}
		if cmd.Flags().Changed("partition") {
			p.partition = &partition
		}
		if _, err := a.logClient(); err != nil {
			return err
		}
		return p.run(cmd.Context(), separator, tombstone)
	})
	return cmd
}

type producer struct {
	app       *app
	idem      *router.Producer // made at the first batch
	retryFor  time.Duration
	topic     string
	partition *int32
	batchSize int

	batch      []*sharelogv1.Record
	batchBytes int
	produced   int

	start         time.Time
	progress      progressMode
	lastProgress  time.Time
	progressShown bool // a progress line is on the terminal
}

// progressMode is how produce reports progress on stderr.
type progressMode int

const (
	progressOff     progressMode = iota
	progressInPlace              // a terminal: one line, rewritten
	progressLines                // --progress to a file or pipe: one line each time
)

// inputLine is one line of stdin; more tells that further input was already buffered.
type inputLine struct {
	line []byte
	more bool
	err  error
}

func (p *producer) run(ctx context.Context, separator string, tombstone *string) error {
	lines := make(chan inputLine)
	stop := make(chan struct{})
	defer close(stop)
	// Reading stdin cannot be interrupted, so it runs apart and an interrupt (SIGINT) still ends
	// the command.
	go readLines(p.app.stdin, lines, stop)

	for {
		var in inputLine
		select {
		case <-ctx.Done():
			// Interrupted while waiting for input: nothing is pending (see below), stop cleanly.
			return p.summary()
		case in = <-lines:
		}
		if in.line != nil {
			p.add(lineRecord(in.line, separator, tombstone))
			// Send when the batch is full, or when no more input is waiting: then nothing stays
			// pending while we block on stdin.
			if len(p.batch) >= p.batchSize || p.batchBytes >= maxBatchBytes || !in.more {
				if err := p.flush(ctx); err != nil {
					return err
				}
			}
		}
		if in.err != nil {
			if !errors.Is(in.err, io.EOF) {
				return fmt.Errorf("reading stdin: %w", in.err)
			}
			if err := p.flush(ctx); err != nil {
				return err
			}
			return p.summary()
		}
	}
}

// readLines sends each line of r, without its line terminator, then a final error (io.EOF at
// the end of the input).
func readLines(r io.Reader, out chan<- inputLine, stop <-chan struct{}) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		in := inputLine{err: err}
		if len(line) > 0 {
			line = bytes.TrimSuffix(line, []byte("\n"))
			line = bytes.TrimSuffix(line, []byte("\r"))
			in.line = line
			in.more = err == nil && br.Buffered() > 0
		}
		if in.line == nil && err == nil {
			continue
		}
		select {
		case out <- in:
		case <-stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// lineRecord turns a line into a record: "key<SEP>value" or a value alone.
func lineRecord(line []byte, separator string, tombstone *string) *sharelogv1.Record {
	rec := &sharelogv1.Record{}
	value := line
	if separator != "" {
		if k, v, ok := bytes.Cut(line, []byte(separator)); ok {
			rec.Key = append([]byte{}, k...) // non-nil: an empty key is still a key
			value = v
		}
	}
	if tombstone == nil || string(value) != *tombstone {
		rec.Value = append([]byte{}, value...) // non-nil: an empty value is not a tombstone
	}
	return rec
}

func (p *producer) add(rec *sharelogv1.Record) {
	p.batch = append(p.batch, rec)
	p.batchBytes += len(rec.Key) + len(rec.Value)
}

func (p *producer) flush(ctx context.Context) error {
	if len(p.batch) == 0 {
		return nil
	}
	if p.idem == nil {
		o := router.ProducerOptions{RetryTimeout: p.retryFor, AttemptTimeout: p.app.timeout}
		callCtx, cancel := p.app.callCtx(ctx)
		idem, err := router.NewProducer(callCtx, p.app.conn, o)
		cancel()
		if err != nil {
			return p.failed(ctx, err)
		}
		p.idem = idem
	}
	results, err := p.idem.Produce(ctx, p.topic, p.partition, p.batch)
	var perr *router.ProduceError
	if errors.As(err, &perr) {
		stored := 0
		for _, r := range results {
			if r.GetErrorCode() == sharelogv1.ErrorCode_ERROR_CODE_NONE {
				stored++
			}
		}
		if stored == 0 && len(perr.Partitions) == 1 {
			for _, e := range perr.Partitions {
				err = e // one partition, nothing stored: its error is the command's
			}
		} else {
			p.produced += stored
			p.printResults(results)
		}
	}
	if err != nil {
		return p.failed(ctx, err)
	}
	p.produced += len(p.batch)
	p.batch, p.batchBytes = nil, 0
	if err := p.printResults(results); err != nil {
		return err
	}
	p.reportProgress()
	return nil
}

// printResults prints a batch's results with -o json (as a ProduceResponse) or --verbose.
func (p *producer) printResults(results []*sharelogv1.ProduceResult) error {
	if p.app.jsonOutput() {
		return p.app.printJSON(&sharelogv1.ProduceResponse{Results: results})
	}
	if p.app.verbose {
		for _, r := range results {
			if r.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				fmt.Fprintf(p.app.stdout, "partition=%d error=%s\n", r.GetPartition(), r.GetErrorCode())
				continue
			}
			fmt.Fprintf(p.app.stdout, "partition=%d offset=%d\n", r.GetPartition(), r.GetOffset())
		}
	}
	return nil
}

// failed reports what was stored before err and returns err.
func (p *producer) failed(ctx context.Context, err error) error {
	p.clearProgress()
	if p.produced > 0 && !p.app.jsonOutput() {
		fmt.Fprintf(p.app.stdout, "produced %s to %s before the error\n", plural(p.produced, "record", "records"), p.topic)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: the last batch of %s may or may not have been written", plural(len(p.batch), "record", "records"))
	}
	return err
}

// reportProgress prints the progress line when progressInterval has passed since the last one.
func (p *producer) reportProgress() {
	if p.progress == progressOff {
		return
	}
	now := time.Now()
	if now.Sub(p.lastProgress) < progressInterval {
		return
	}
	p.lastProgress = now
	rate := 0.0
	if s := now.Sub(p.start).Seconds(); s > 0 {
		rate = float64(p.produced) / s
	}
	line := fmt.Sprintf("produced %s to %s so far (%.1f records/s)", plural(p.produced, "record", "records"), p.topic, rate)
	if p.progress == progressInPlace {
		fmt.Fprintf(p.app.stderr, "\r\033[K%s", line)
		p.progressShown = true
		return
	}
	fmt.Fprintln(p.app.stderr, line)
}

// clearProgress erases the progress line from the terminal before the last words.
func (p *producer) clearProgress() {
	if p.progressShown {
		fmt.Fprint(p.app.stderr, "\r\033[K")
		p.progressShown = false
	}
}

// summary prints the last line, on stdout unless that holds JSON.
func (p *producer) summary() error {
	p.clearProgress()
	to := p.app.stdout
	if p.app.jsonOutput() {
		to = p.app.stderr
	}
	_, err := fmt.Fprintf(to, "produced %s to %s in %s\n", plural(p.produced, "record", "records"), p.topic,
		time.Since(p.start).Round(time.Millisecond))
	return err
}
