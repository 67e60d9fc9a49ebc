package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// share-groups: the administration kafka-share-groups.sh offers, with its
// column layout (tab-aligned like the other sharelogctl tables).

// missingValue is what Kafka's tool prints for a value that does not exist.
const missingValue = "-"

// shareGroupsClient connects (lazily, sharing the connection of
// logClient) to the ShareGroupService.
func (a *app) shareGroupsClient() (sharelogv1.ShareGroupServiceClient, error) {
	if _, err := a.logClient(); err != nil {
		return nil, err
	}
	return sharelogv1.NewShareGroupServiceClient(a.conn), nil
}

func (a *app) shareGroupsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "share-groups",
		Aliases: []string{"share-group"},
		Short:   "List, describe, reset and delete share groups (kafka-share-groups.sh)",
		Long: `Administer share groups as Kafka's kafka-share-groups.sh does: list them, describe their
offsets (start offset and lag per share-partition), members or state, reset their start
offsets, delete their offsets, delete them.

Resetting or deleting offsets and deleting a group need a group without members: stop its
consumers first (the server answers NON_EMPTY_GROUP otherwise).`,
		Example: `  sharelogctl share-groups list --state all
  sharelogctl share-groups describe orders-workers --members
  sharelogctl share-groups reset-offsets orders-workers --to-earliest --all-topics --execute
  sharelogctl share-groups delete orders-workers`,
	}
	cmd.AddCommand(a.sgListCmd(), a.sgDescribeCmd(), a.sgConfigCmd(), a.sgResetOffsetsCmd(), a.sgDeleteOffsetsCmd(), a.sgDeleteCmd())
	return cmd
}

// stateNames are the states as Kafka's tool names them.
var stateNames = map[sharelogv1.ShareGroupState]string{
	sharelogv1.ShareGroupState_SHARE_GROUP_STATE_EMPTY:  "Empty",
	sharelogv1.ShareGroupState_SHARE_GROUP_STATE_STABLE: "Stable",
	sharelogv1.ShareGroupState_SHARE_GROUP_STATE_DEAD:   "Dead",
}

func stateName(s sharelogv1.ShareGroupState) string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return "Unknown"
}

// parseStates parses a comma-separated list of states, case-insensitive.
func parseStates(s string) (map[sharelogv1.ShareGroupState]bool, error) {
	out := map[sharelogv1.ShareGroupState]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		found := false
		for st, name := range stateNames {
			if strings.EqualFold(part, name) {
				out[st], found = true, true
			}
		}
		if !found {
			return nil, fmt.Errorf("invalid state %q in --state: valid states are Empty, Stable and Dead", part)
		}
	}
	return out, nil
}

// allStates is the --state value that lists every group with its state.
const allStates = "all"

func (a *app) sgListCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List share groups, sorted by id",
		Long: `List the share groups, one id per line, sorted. With --state STATES (comma-separated:
Empty, Stable, Dead; case-insensitive) print a GROUP STATE table of the groups in those
states; --state all prints every group with its state.`,
		Example: `  sharelogctl share-groups list
  sharelogctl share-groups list --state all
  sharelogctl share-groups list --state Stable`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&state, "state", "", `print a GROUP STATE table of the groups in these states (Empty, Stable, Dead; comma-separated) or "all"`)
	cmd.RunE = a.runE(func(cmd *cobra.Command, _ []string) error {
		var want map[sharelogv1.ShareGroupState]bool
		if state != "" && !strings.EqualFold(state, allStates) {
			var err error
			if want, err = parseStates(state); err != nil {
				return err
			}
		}
		client, err := a.shareGroupsClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.ListShareGroups(ctx, &sharelogv1.ListShareGroupsRequest{})
		if err != nil {
			return err
		}
		if want != nil {
			resp.Groups = slices.DeleteFunc(resp.Groups, func(g *sharelogv1.ShareGroupListing) bool { return !want[g.GetState()] })
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		if state == "" {
			for _, g := range resp.GetGroups() {
				fmt.Fprintln(a.stdout, g.GetGroupId())
			}
			return nil
		}
		tw := newTable(a)
		fmt.Fprintln(tw, "GROUP\tSTATE")
		for _, g := range resp.GetGroups() {
			fmt.Fprintf(tw, "%s\t%s\n", g.GetGroupId(), stateName(g.GetState()))
		}
		return tw.Flush()
	})
	return cmd
}

func (a *app) sgDescribeCmd() *cobra.Command {
	var offsets, members, state bool
	cmd := &cobra.Command{
		Use:   "describe GROUP",
		Short: "Describe a share group's offsets (default), members or state",
		Long: `Describe a share group, with the columns of kafka-share-groups.sh --describe:

  --offsets (default)  GROUP TOPIC PARTITION START-OFFSET LAG
                       per share-partition of every topic the group has share state on;
                       START-OFFSET is the share-partition start offset, LAG the records
                       not yet acknowledged or archived ("-" when not initialised)
  --members            GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT
                       (--verbose adds MEMBER-EPOCH)
  --state              GROUP COORDINATOR (ID) STATE #MEMBERS
                       (--verbose adds GROUP-EPOCH and ASSIGNMENT-EPOCH); a group with a
                       dead-letter topic adds DEAD-LETTER-TOPIC, DEAD-LETTERED (records
                       copied there) and DLQ-SKIPPED (archived without a copy), both
                       counted since the server started

The coordinator is the group's coordinator as DescribeCluster names it (its gRPC address and
instance ID) in a cluster, the server sharelogctl talks to (node id 0) otherwise.`,
		Example: `  sharelogctl share-groups describe workers
  sharelogctl share-groups describe workers --members -v
  sharelogctl share-groups describe workers --state -o json`,
		Args: cobra.ExactArgs(1),
	}
	f := cmd.Flags()
	f.BoolVar(&offsets, "offsets", false, "describe start offsets and lag (the default)")
	f.BoolVar(&members, "members", false, "describe the members and their assignments")
	f.BoolVar(&state, "state", false, "describe the group's state")
	cmd.MarkFlagsMutuallyExclusive("offsets", "members", "state")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		group := args[0]
		client, err := a.shareGroupsClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		if !members && !state {
			resp, err := client.DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: group})
			if err != nil {
				return err
			}
			if a.jsonOutput() {
				return a.printJSON(resp)
			}
			return a.printOffsets(group, resp)
		}
		d, err := client.DescribeShareGroup(ctx, &sharelogv1.DescribeShareGroupRequest{GroupId: group})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(d)
		}
		if members {
			return a.printMembers(d)
		}
		return a.printState(d, a.coordinatorOf(ctx, group))
	})
	return cmd
}

// coordinatorOf is the group's coordinator as "host:port (id)" when the
// server names one (DescribeCluster: a cluster in partitioned mode), else
// the server sharelogctl talks to, as node 0.
func (a *app) coordinatorOf(ctx context.Context, group string) string {
	self := a.addr + " (0)"
	client, err := a.logClient()
	if err != nil {
		return self
	}
	dc, err := client.DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
	if err != nil {
		return self
	}
	return coordinatorName(dc, group, self)
}

// coordinatorName is group's coordinator in dc as "host:port (id)", or
// fallback when dc names none (a single server, a group without one).
func coordinatorName(dc *sharelogv1.DescribeClusterResponse, group, fallback string) string {
	if dc.GetMode() == "single" {
		return fallback
	}
	for _, g := range dc.GetGroups() {
		if g.GetGroupId() != group || g.GetCoordinatorId() == "" {
			continue
		}
		for _, in := range dc.GetInstances() {
			if in.GetInstanceId() == g.GetCoordinatorId() {
				return in.GetGrpcAddress() + " (" + in.GetInstanceId() + ")"
			}
		}
	}
	return fallback
}

func orMissing(s string) string {
	if s == "" {
		return missingValue
	}
	return s
}

func offsetOrMissing(v int64) string {
	if v < 0 {
		return missingValue
	}
	return strconv.FormatInt(v, 10)
}

func (a *app) printOffsets(group string, resp *sharelogv1.DescribeShareGroupOffsetsResponse) error {
	type row struct {
		topic      string
		partition  int32
		start, lag int64
	}
	var rows []row
	for _, t := range resp.GetTopics() {
		for _, p := range t.GetPartitions() {
			rows = append(rows, row{t.GetTopic(), p.GetPartition(), p.GetStartOffset(), p.GetLag()})
		}
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(a.stdout, "Share group '%s' has no offset information.\n", group)
		return err
	}
	slices.SortFunc(rows, func(x, y row) int {
		return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition))
	})
	tw := newTable(a)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tSTART-OFFSET\tLAG")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", group, r.topic, r.partition, offsetOrMissing(r.start), offsetOrMissing(r.lag))
	}
	return tw.Flush()
}

// assignmentString renders "t1:0,1;t2:2" as Kafka's tool does.
func assignmentString(as *sharelogv1.Assignment) (string, int) {
	var topics []string
	n := 0
	tps := slices.Clone(as.GetTopicPartitions())
	slices.SortFunc(tps, func(x, y *sharelogv1.TopicPartitions) int { return cmp.Compare(x.GetTopic(), y.GetTopic()) })
	for _, tp := range tps {
		ps := slices.Sorted(slices.Values(tp.GetPartitions()))
		strs := make([]string, len(ps))
		for i, p := range ps {
			strs[i] = strconv.Itoa(int(p))
		}
		n += len(ps)
		topics = append(topics, tp.GetTopic()+":"+strings.Join(strs, ","))
	}
	return orMissing(strings.Join(topics, ";")), n
}

func (a *app) printMembers(d *sharelogv1.DescribeShareGroupResponse) error {
	if len(d.GetMembers()) == 0 {
		_, err := fmt.Fprintf(a.stdout, "Share group '%s' has no active members.\n", d.GetGroupId())
		return err
	}
	tw := newTable(a)
	if a.verbose {
		fmt.Fprintln(tw, "GROUP\tCONSUMER-ID\tHOST\tCLIENT-ID\t#PARTITIONS\tMEMBER-EPOCH\tASSIGNMENT")
	} else {
		fmt.Fprintln(tw, "GROUP\tCONSUMER-ID\tHOST\tCLIENT-ID\t#PARTITIONS\tASSIGNMENT")
	}
	for _, m := range d.GetMembers() {
		as, n := assignmentString(m.GetAssignment())
		if a.verbose {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", d.GetGroupId(), m.GetMemberId(), orMissing(m.GetClientHost()),
				orMissing(m.GetClientId()), n, m.GetMemberEpoch(), as)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", d.GetGroupId(), m.GetMemberId(), orMissing(m.GetClientHost()),
				orMissing(m.GetClientId()), n, as)
		}
	}
	return tw.Flush()
}

func (a *app) printState(d *sharelogv1.DescribeShareGroupResponse, coordinator string) error {
	dlq := d.GetConfig().GetDeadLetterTopic()
	var dlqHead, dlqCols string
	if dlq != "" {
		dlqHead = "\tDEAD-LETTER-TOPIC\tDEAD-LETTERED\tDLQ-SKIPPED"
		dlqCols = fmt.Sprintf("\t%s\t%d\t%d", dlq, d.GetDeadLetteredRecords(), d.GetDeadLetterSkippedRecords())
	}
	tw := newTable(a)
	if a.verbose {
		fmt.Fprintln(tw, "GROUP\tCOORDINATOR (ID)\tSTATE\tGROUP-EPOCH\tASSIGNMENT-EPOCH\t#MEMBERS"+dlqHead)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d%s\n", d.GetGroupId(), coordinator, stateName(d.GetState()),
			d.GetGroupEpoch(), d.GetAssignmentEpoch(), len(d.GetMembers()), dlqCols)
	} else {
		fmt.Fprintln(tw, "GROUP\tCOORDINATOR (ID)\tSTATE\t#MEMBERS"+dlqHead)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d%s\n", d.GetGroupId(), coordinator, stateName(d.GetState()), len(d.GetMembers()), dlqCols)
	}
	return tw.Flush()
}

// --- reset-offsets ------------------------------------------------------------

type resetOptions struct {
	toEarliest, toLatest bool
	toDatetime           string
	topics               []string
	allTopics            bool
	dryRun, execute      bool
}

// resetTP is a topic-partition of the reset plan.
type resetTP struct {
	topic     string
	partition int32
}

func (a *app) sgResetOffsetsCmd() *cobra.Command {
	var o resetOptions
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP (--to-earliest|--to-latest|--to-datetime T) (--topic T[:P,...]|--all-topics) [--dry-run|--execute]",
		Short: "Reset a share group's start offsets (dry run unless --execute)",
		Long: `Compute new start offsets for a share group's share-partitions and, with --execute, set
them: each share-partition restarts there with no records in flight (AlterShareGroupOffsets).
Without --execute (or with --dry-run) it only prints the plan; nothing changes.

Targets (ListOffsets on each partition):
  --to-earliest        the log start offset
  --to-latest          the high watermark
  --to-datetime T      the first offset whose timestamp is at or after T, ISO-8601 as Kafka's
                       YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone (Z, +01:00); without a
                       zone T is local time. A partition without such a record falls back to
                       the high watermark (with a warning).

Scope:
  --topic T            every partition of T; T:0,2 only those partitions (repeatable)
  --all-topics         every partition of the topics the group has share state on

The group must have no members. The plan is printed as GROUP TOPIC PARTITION NEW-OFFSET.`,
		Example: `  sharelogctl share-groups reset-offsets workers --to-earliest --topic orders
  sharelogctl share-groups reset-offsets workers --to-latest --all-topics --execute
  sharelogctl share-groups reset-offsets workers --to-datetime 2026-05-01T00:00:00.000 --topic orders:0,1 --execute`,
		Args: cobra.ExactArgs(1),
	}
	f := cmd.Flags()
	f.BoolVar(&o.toEarliest, "to-earliest", false, "reset to the log start offset")
	f.BoolVar(&o.toLatest, "to-latest", false, "reset to the high watermark")
	f.StringVar(&o.toDatetime, "to-datetime", "", "reset to the first offset at or after this time (YYYY-MM-DDTHH:mm:SS.sss)")
	f.StringArrayVar(&o.topics, "topic", nil, "topic, or topic:partition,partition (repeatable)")
	f.BoolVar(&o.allTopics, "all-topics", false, "every topic the group has share state on")
	f.BoolVar(&o.dryRun, "dry-run", false, "only print the plan (the default)")
	f.BoolVar(&o.execute, "execute", false, "set the new start offsets")
	cmd.MarkFlagsOneRequired("to-earliest", "to-latest", "to-datetime")
	cmd.MarkFlagsMutuallyExclusive("to-earliest", "to-latest", "to-datetime")
	cmd.MarkFlagsOneRequired("topic", "all-topics")
	cmd.MarkFlagsMutuallyExclusive("topic", "all-topics")
	cmd.MarkFlagsMutuallyExclusive("dry-run", "execute")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		return a.resetOffsets(cmd.Context(), args[0], o)
	})
	return cmd
}

// nonEmptyError is the NON_EMPTY_GROUP error the server would give, raised
// before a dry run too (as Kafka's tool does).
func nonEmptyError(group string, members int) error {
	st := status.New(codes.FailedPrecondition,
		fmt.Sprintf("share group %q has %s; stop its consumers first", group, plural(members, "active member", "active members")))
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(apierr.NonEmptyGroup), Domain: apierr.Domain}); err == nil {
		st = withInfo
	}
	return st.Err()
}

func (a *app) resetOffsets(ctx context.Context, group string, o resetOptions) error {
	var ts int64
	if o.toDatetime != "" {
		t, err := parseDateTime(o.toDatetime)
		if err != nil {
			return err
		}
		ts = t.UnixMilli()
	}
	client, err := a.shareGroupsClient()
	if err != nil {
		return err
	}
	logs, err := a.logClient()
	if err != nil {
		return err
	}
	call := func(fn func(context.Context) error) error {
		cctx, cancel := a.callCtx(ctx)
		defer cancel()
		return fn(cctx)
	}

	// The group must be inactive; one that does not exist yet is fine
	// with --topic (AlterShareGroupOffsets creates it).
	err = call(func(ctx context.Context) error {
		d, err := client.DescribeShareGroup(ctx, &sharelogv1.DescribeShareGroupRequest{GroupId: group})
		if err == nil && len(d.GetMembers()) > 0 {
			return nonEmptyError(group, len(d.GetMembers()))
		}
		if status.Code(err) == codes.NotFound && !o.allTopics {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}

	var plan []resetTP
	if o.allTopics {
		err = call(func(ctx context.Context) error {
			resp, err := client.DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: group})
			for _, t := range resp.GetTopics() {
				for _, p := range t.GetPartitions() {
					plan = append(plan, resetTP{t.GetTopic(), p.GetPartition()})
				}
			}
			return err
		})
	} else {
		plan, err = a.topicPartitions(ctx, logs, o.topics)
	}
	if err != nil {
		return err
	}
	slices.SortFunc(plan, func(x, y resetTP) int {
		return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition))
	})
	plan = slices.Compact(plan)

	spec := sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST
	switch {
	case o.toLatest:
		spec = sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST
	case o.toDatetime != "":
		spec = sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP
	}
	targets := make([]int64, len(plan))
	for i, p := range plan {
		err := call(func(ctx context.Context) error {
			req := &sharelogv1.ListOffsetsRequest{Topic: p.topic, Partition: p.partition, Spec: spec, Timestamp: ts}
			resp, err := logs.ListOffsets(ctx, req)
			if err != nil {
				return fmt.Errorf("%s/%d: %w", p.topic, p.partition, err)
			}
			targets[i] = resp.GetOffset()
			if targets[i] >= 0 {
				return nil
			}
			fmt.Fprintf(a.stdout, "Warn: Partition %d from topic %s is empty. Falling back to latest known offset.\n", p.partition, p.topic)
			req.Spec = sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST
			if resp, err = logs.ListOffsets(ctx, req); err != nil {
				return fmt.Errorf("%s/%d: %w", p.topic, p.partition, err)
			}
			targets[i] = resp.GetOffset()
			return nil
		})
		if err != nil {
			return err
		}
	}

	req := &sharelogv1.AlterShareGroupOffsetsRequest{GroupId: group}
	for i, p := range plan {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].GetTopic() != p.topic {
			req.Topics = append(req.Topics, &sharelogv1.AlterShareGroupOffsetsTopic{Topic: p.topic})
		}
		t := req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, &sharelogv1.AlterShareGroupOffsetsPartition{Partition: p.partition, StartOffset: targets[i]})
	}
	var resp *sharelogv1.AlterShareGroupOffsetsResponse
	if o.execute && len(plan) > 0 {
		if err := call(func(ctx context.Context) (err error) {
			resp, err = client.AlterShareGroupOffsets(ctx, req)
			return err
		}); err != nil {
			return err
		}
	}
	if a.jsonOutput() {
		if resp != nil {
			return a.printJSON(resp)
		}
		return a.printJSON(req)
	}
	if len(plan) > 0 {
		tw := newTable(a)
		fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tNEW-OFFSET")
		for i, p := range plan {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", group, p.topic, p.partition, targets[i])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return alterFailures(resp, len(plan))
}

// alterFailures summarises the partitions an AlterShareGroupOffsets refused.
func alterFailures(resp *sharelogv1.AlterShareGroupOffsetsResponse, total int) error {
	var failed []string
	for _, t := range resp.GetTopics() {
		for _, p := range t.GetPartitions() {
			if p.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				failed = append(failed, fmt.Sprintf("%s/%d: %s (%s)", t.GetTopic(), p.GetPartition(), p.GetErrorMessage(), errorCodeName(p.GetErrorCode())))
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("reset failed for %d of %s: %s", len(failed), plural(total, "partition", "partitions"), strings.Join(failed, "; "))
}

// topicPartitions expands --topic values: "t" is every partition of t
// (DescribeTopic), "t:0,2" those partitions.
func (a *app) topicPartitions(ctx context.Context, logs sharelogv1.LogServiceClient, args []string) ([]resetTP, error) {
	var out []resetTP
	for _, arg := range args {
		topic, parts, hasParts := strings.Cut(arg, ":")
		if topic == "" {
			return nil, fmt.Errorf("invalid --topic %q: expected a topic name, or topic:partition,partition", arg)
		}
		if hasParts {
			for _, s := range strings.Split(parts, ",") {
				p, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
				if err != nil || p < 0 {
					return nil, fmt.Errorf("invalid partition %q in --topic %q", s, arg)
				}
				out = append(out, resetTP{topic, int32(p)})
			}
			continue
		}
		cctx, cancel := a.callCtx(ctx)
		t, err := logs.DescribeTopic(cctx, &sharelogv1.DescribeTopicRequest{Name: topic})
		cancel()
		if err != nil {
			return nil, err
		}
		for p := range t.GetPartitionCount() {
			out = append(out, resetTP{topic, p})
		}
	}
	return out, nil
}

// parseDateTime parses Kafka's --to-datetime format, YYYY-MM-DDTHH:mm:SS.sss
// (the fraction optional), with an optional zone (Z, +01:00, +0100);
// without one it is local time.
func parseDateTime(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02T15:04:05Z07:00", "2006-01-02T15:04:05Z0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	if t, err := time.ParseInLocation("2006-01-02T15:04:05", s, time.Local); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("invalid --to-datetime %q: want YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone (Z, +01:00)", s)
}

// --- delete-offsets, delete -------------------------------------------------

func (a *app) sgDeleteOffsetsCmd() *cobra.Command {
	var topics []string
	cmd := &cobra.Command{
		Use:   "delete-offsets GROUP --topic T [--topic T2 ...]",
		Short: "Delete a share group's offsets of topics (their share-partitions become uninitialised)",
		Long: `Delete a share group's state on the given topics: their share-partitions become
uninitialised, and start again from the group's auto_offset_reset when next used. The group
must have no members. One line per topic: TOPIC STATUS ("Successful" or "Error: ...");
exit status 1 if any topic failed.`,
		Example: `  sharelogctl share-groups delete-offsets workers --topic orders`,
		Args:    cobra.ExactArgs(1),
	}
	cmd.Flags().StringArrayVar(&topics, "topic", nil, "topic whose offsets to delete (repeatable)")
	_ = cmd.MarkFlagRequired("topic")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		var uniq []string
		for _, t := range topics {
			if !slices.Contains(uniq, t) {
				uniq = append(uniq, t)
			}
		}
		client, err := a.shareGroupsClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.DeleteShareGroupOffsets(ctx, &sharelogv1.DeleteShareGroupOffsetsRequest{GroupId: args[0], Topics: uniq})
		if err != nil {
			return err
		}
		failed := 0
		for _, t := range resp.GetTopics() {
			if t.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				failed++
			}
		}
		if a.jsonOutput() {
			if err := a.printJSON(resp); err != nil {
				return err
			}
		} else {
			results := slices.Clone(resp.GetTopics())
			slices.SortFunc(results, func(x, y *sharelogv1.DeleteShareGroupOffsetsTopicResult) int {
				return cmp.Compare(x.GetTopic(), y.GetTopic())
			})
			tw := newTable(a)
			fmt.Fprintln(tw, "TOPIC\tSTATUS")
			for _, t := range results {
				st := "Successful"
				if t.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
					st = fmt.Sprintf("Error: %s (%s)", t.GetErrorMessage(), errorCodeName(t.GetErrorCode()))
				}
				fmt.Fprintf(tw, "%s\t%s\n", t.GetTopic(), st)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if failed > 0 {
			return fmt.Errorf("deleting offsets failed for %d of %s", failed, plural(len(uniq), "topic", "topics"))
		}
		return nil
	})
	return cmd
}

func (a *app) sgDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete GROUP",
		Short: "Delete a share group: its config and share state (its sessions end)",
		Long: `Delete a share group without members: its configuration and share state go, its share
sessions end, and the id may later be used for a new group.`,
		Example: `  sharelogctl share-groups delete workers`,
		Args:    cobra.ExactArgs(1),
	}
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		client, err := a.shareGroupsClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.DeleteShareGroup(ctx, &sharelogv1.DeleteShareGroupRequest{GroupId: args[0]})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		_, err = fmt.Fprintf(a.stdout, "Deletion of requested share groups ('%s') was successful.\n", args[0])
		return err
	})
	return cmd
}
