package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func (a *app) topicsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "Create, list, describe, grow and delete topics",
		Example: `  sharelogctl topics create orders --partitions 3
  sharelogctl topics list
  sharelogctl topics describe orders
  sharelogctl topics add-partitions orders --count 6
  sharelogctl topics delete orders`,
	}
	cmd.AddCommand(a.topicsCreateCmd(), a.topicsListCmd(), a.topicsDescribeCmd(), a.topicsAddPartitionsCmd(), a.topicsDeleteCmd())
	return cmd
}

func (a *app) topicsCreateCmd() *cobra.Command {
	var (
		partitions    int32
		segmentBytes  int64
		retentionMs   int64
		cleanupPolicy string
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Long: `Create a topic. Config flags that are not given take the server defaults
(segment size: the server's --segment-bytes; retention: -1 = forever; cleanup policy: delete).`,
		Example: `  sharelogctl topics create orders
  sharelogctl topics create users --partitions 6 --cleanup-policy compact
  sharelogctl topics create events --retention-ms 86400000 --segment-bytes 16777216`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().Int32Var(&partitions, "partitions", 1, "number of partitions (1..10000)")
	cmd.Flags().Int64Var(&segmentBytes, "segment-bytes", 0, "size at which a segment rolls (default: the server's)")
	cmd.Flags().Int64Var(&retentionMs, "retention-ms", 0, "time retention in ms, -1 = forever (default -1)")
	cmd.Flags().StringVar(&cleanupPolicy, "cleanup-policy", "", `"delete" (default), "compact" or "compact,delete"`)
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		req := &sharelogv1.CreateTopicRequest{
			Name:       args[0],
			Partitions: partitions,
			Config:     &sharelogv1.TopicConfig{},
		}
		if cmd.Flags().Changed("segment-bytes") {
			req.Config.SegmentBytes = &segmentBytes
		}
		if cmd.Flags().Changed("retention-ms") {
			req.Config.RetentionMs = &retentionMs
		}
		if cmd.Flags().Changed("cleanup-policy") {
			req.Config.CleanupPolicy = &cleanupPolicy
		}
		client, err := a.logClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		topic, err := client.CreateTopic(ctx, req)
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(topic)
		}
		_, err = fmt.Fprintf(a.stdout, "created topic %s (topic id %s, %s)\n",
			topic.GetName(), topic.GetTopicId(), plural(int(topic.GetPartitionCount()), "partition", "partitions"))
		return err
	})
	return cmd
}

func (a *app) topicsListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List topics, sorted by name",
		Example: `  sharelogctl topics list
  sharelogctl topics list -o json | jq -r '.topics[].name'`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = a.runE(func(cmd *cobra.Command, _ []string) error {
		client, err := a.logClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.ListTopics(ctx, &sharelogv1.ListTopicsRequest{})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		tw := newTable(a)
		fmt.Fprintln(tw, "NAME\tTOPIC ID\tPARTITIONS")
		for _, t := range resp.GetTopics() {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", t.GetName(), t.GetTopicId(), t.GetPartitionCount())
		}
		return tw.Flush()
	})
	return cmd
}

func (a *app) topicsDescribeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Describe a topic: its id, config and the bounds of each partition",
		Long: `Describe a topic. The first line gives its id, partition count and config; the table
gives, per partition, the log start offset (first readable offset), the high watermark (next
offset to be assigned), the bytes on disk and the number of segments.`,
		Example: `  sharelogctl topics describe orders`,
		Args:    cobra.ExactArgs(1),
	}
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		client, err := a.logClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		topic, err := client.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: args[0]})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(topic)
		}
		c := topic.GetConfig()
		fmt.Fprintf(a.stdout, "Topic: %s\tTopicId: %s\tPartitionCount: %d\tConfig: segment_bytes=%d,retention_ms=%d,cleanup_policy=%s\n",
			topic.GetName(), topic.GetTopicId(), topic.GetPartitionCount(),
			c.GetSegmentBytes(), c.GetRetentionMs(), c.GetCleanupPolicy())
		tw := newTable(a)
		fmt.Fprintln(tw, "PARTITION\tLOG START\tHIGH WATERMARK\tSIZE BYTES\tSEGMENTS")
		for _, p := range topic.GetPartitions() {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\n",
				p.GetPartition(), p.GetLogStartOffset(), p.GetHighWatermark(), p.GetSizeBytes(), p.GetSegmentCount())
		}
		return tw.Flush()
	})
	return cmd
}

func (a *app) topicsAddPartitionsCmd() *cobra.Command {
	var (
		count        int32
		validateOnly bool
	)
	cmd := &cobra.Command{
		Use:   "add-partitions TOPIC --count N",
		Short: "Add partitions to a topic: N is the new total",
		Long: `Add partitions to a topic (Kafka's CreatePartitions). --count is the new total number of
partitions, more than the topic has: partitions are never removed. The new partitions start
empty; keyed records are routed by the new count from then on, and share groups and Kafka
consumer groups take the new partitions at their next assignment.`,
		Example: `  sharelogctl topics add-partitions orders --count 6
  sharelogctl topics add-partitions orders --count 12 --validate-only`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().Int32Var(&count, "count", 0, "the new total number of partitions (required)")
	cmd.Flags().BoolVar(&validateOnly, "validate-only", false, "check the request, change nothing")
	_ = cmd.MarkFlagRequired("count")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		client, err := a.logClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.CreatePartitions(ctx, &sharelogv1.CreatePartitionsRequest{Topic: args[0], Count: count, ValidateOnly: validateOnly})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		verb := "topic %s now has %s\n"
		if validateOnly {
			verb = "topic %s would have %s (validate only: nothing changed)\n"
		}
		_, err = fmt.Fprintf(a.stdout, verb, args[0], plural(int(resp.GetTopic().GetPartitionCount()), "partition", "partitions"))
		return err
	})
	return cmd
}

func (a *app) topicsDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a topic with its data and share-group state",
		Long: `Delete a topic: its records, its share-group state, and its open change streams end.
A topic created again under the same name gets a new topic id.`,
		Example: `  sharelogctl topics delete orders`,
		Args:    cobra.ExactArgs(1),
	}
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		client, err := a.logClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: args[0]})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		_, err = fmt.Fprintf(a.stdout, "deleted topic %s\n", args[0])
		return err
	})
	return cmd
}

// newTable returns a tabwriter aligning columns on stdout, separated by two spaces.
func newTable(a *app) *tabwriter.Writer {
	return tabwriter.NewWriter(a.stdout, 0, 8, 2, ' ', 0)
}
