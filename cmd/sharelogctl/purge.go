package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/spf13/cobra"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// purgeGrace is added to the deadline of a Purge call beyond its timeout_ms, so that the
// server's own answer at timeout_ms (REQUEST_TIMED_OUT with the low watermark reached) arrives
// before the client gives up.
const purgeGrace = time.Second

func (a *app) purgeCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "purge --offset-json-file FILE",
		Short: "Delete the records below an offset, per partition (Kafka DeleteRecords)",
		Long: `Delete every record below the given offset of each partition: its log start offset
(low watermark) becomes that offset. Offset -1 purges up to the high watermark.

FILE ("-" for stdin) has the format of Kafka's kafka-delete-records.sh:

  {"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}

"version" is optional and must be 1. A missing or empty "partitions", a missing or mistyped
field, or a topic-partition listed twice is an error: nothing is sent to the server.

One Purge request is sent (timeout_ms = --timeout); one line per partition is printed, in the
order of the file:

  partition: foo-1	low_watermark: 1
  partition: foo-2	error: <message>

Exit status: 0 if every partition was purged, 1 if the file is invalid, the request failed,
or any partition failed.`,
		Example: `  echo '{"partitions":[{"topic":"orders","partition":0,"offset":100}],"version":1}' > purge.json
  sharelogctl purge --offset-json-file purge.json
  echo '{"partitions":[{"topic":"orders","partition":0,"offset":-1}]}' | sharelogctl purge --offset-json-file -`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&file, "offset-json-file", "", `JSON file of the partitions and offsets ("-" = stdin)`)
	_ = cmd.MarkFlagRequired("offset-json-file")
	cmd.RunE = a.runE(func(cmd *cobra.Command, _ []string) error {
		data, err := a.readInput(file)
		if err != nil {
			return fmt.Errorf("reading offset JSON file: %w", err)
		}
		entries, err := parsePurgeJSON(data)
		if err != nil {
			return fmt.Errorf("offset JSON file %s: %w", file, err)
		}
		client, err := a.logClient()
		if err != nil {
			return err
		}
		return a.purge(cmd.Context(), client, entries)
	})
	return cmd
}

func (a *app) readInput(file string) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(a.stdin)
	}
	return os.ReadFile(file)
}

// buildPurgeRequest groups the entries by topic, topics in order of first appearance.
func buildPurgeRequest(entries []purgeEntry, timeout time.Duration) *sharelogv1.PurgeRequest {
	req := &sharelogv1.PurgeRequest{
		TimeoutMs: int32(min(timeout.Milliseconds(), math.MaxInt32)),
	}
	byTopic := make(map[string]*sharelogv1.PurgeTopic)
	for _, e := range entries {
		t := byTopic[e.Topic]
		if t == nil {
			t = &sharelogv1.PurgeTopic{Topic: e.Topic}
			byTopic[e.Topic] = t
			req.Topics = append(req.Topics, t)
		}
		t.Partitions = append(t.Partitions, &sharelogv1.PurgePartition{Partition: e.Partition, Offset: e.Offset})
	}
	return req
}

func (a *app) purge(ctx context.Context, client sharelogv1.LogServiceClient, entries []purgeEntry) error {
	req := buildPurgeRequest(entries, a.timeout)
	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if a.timeout > 0 {
		callCtx, cancel = context.WithTimeout(ctx, a.timeout+purgeGrace)
	}
	defer cancel()
	resp, err := client.Purge(callCtx, req)
	if err != nil {
		return err
	}

	results := make(map[purgeEntry]*sharelogv1.PurgePartitionResult)
	for _, t := range resp.GetTopics() {
		for _, p := range t.GetPartitions() {
			results[purgeEntry{Topic: t.GetTopic(), Partition: p.GetPartition()}] = p
		}
	}
	failed := 0
	for _, e := range entries {
		r := results[purgeEntry{Topic: e.Topic, Partition: e.Partition}]
		if r == nil || r.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
			failed++
		}
		if a.jsonOutput() {
			continue
		}
		switch {
		case r == nil:
			fmt.Fprintf(a.stdout, "partition: %s\terror: the response has no result for this partition\n", e.name())
		case r.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE:
			msg := r.GetErrorMessage()
			if msg == "" {
				msg = errorCodeName(r.GetErrorCode())
			}
			fmt.Fprintf(a.stdout, "partition: %s\terror: %s\n", e.name(), msg)
		default:
			fmt.Fprintf(a.stdout, "partition: %s\tlow_watermark: %d\n", e.name(), r.GetLowWatermark())
		}
	}
	if a.jsonOutput() {
		if err := a.printJSON(resp); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("purge failed for %d of %s", failed, plural(len(entries), "partition", "partitions"))
	}
	return nil
}
