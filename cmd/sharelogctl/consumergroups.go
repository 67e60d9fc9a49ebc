package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// consumer-groups: the administration kafka-consumer-groups.sh offers
// (ConsumerGroupService, docs/consumer-groups.md), with its column layout.

func (a *app) consumerGroupsClient() (sharelogv1.ConsumerGroupServiceClient, error) {
	if _, err := a.logClient(); err != nil {
		return nil, err
	}
	return sharelogv1.NewConsumerGroupServiceClient(a.conn), nil
}

func (a *app) consumerGroupsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "consumer-groups",
		Aliases: []string{"consumer-group"},
		Short:   "List, describe, reset and delete consumer groups (kafka-consumer-groups.sh)",
		Long: `Administer Kafka consumer groups (classic and KIP-848) as Kafka's kafka-consumer-groups.sh
does: list them, describe their committed offsets and lag, members or state, reset their
committed offsets, delete them.

Resetting offsets and deleting a group need a group without members: stop its consumers
first (the server answers NON_EMPTY_GROUP otherwise).`,
		Example: `  sharelogctl consumer-groups list --state all
  sharelogctl consumer-groups describe orders-app
  sharelogctl consumer-groups reset-offsets orders-app --topic orders --to-earliest --execute
  sharelogctl consumer-groups delete orders-app`,
	}
	cmd.AddCommand(a.cgListCmd(), a.cgDescribeCmd(), a.cgResetOffsetsCmd(), a.cgDeleteCmd())
	return cmd
}

func (a *app) cgListCmd() *cobra.Command {
	var state, typ string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List consumer groups, sorted by id",
		Long: `List the consumer groups, one id per line, sorted. With --state STATES (comma-separated,
case-insensitive: Empty, PreparingRebalance, CompletingRebalance, Stable for classic groups;
Empty, Assigning, Reconciling, Stable for consumer-protocol groups) or --state all, print a
GROUP TYPE STATE #MEMBERS table of the groups in those states; --type classic|consumer keeps
the groups of that protocol.`,
		Example: `  sharelogctl consumer-groups list
  sharelogctl consumer-groups list --state all
  sharelogctl consumer-groups list --state Stable --type consumer`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&state, "state", "", `print a GROUP TYPE STATE #MEMBERS table of the groups in these states (comma-separated) or "all"`)
	cmd.Flags().StringVar(&typ, "type", "", "only groups of this protocol: classic or consumer")
	cmd.RunE = a.runE(func(cmd *cobra.Command, _ []string) error {
		req := &sharelogv1.ListConsumerGroupsRequest{}
		switch strings.ToLower(typ) {
		case "":
		case "classic":
			req.Type = sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_CLASSIC
		case "consumer":
			req.Type = sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_CONSUMER
		default:
			return fmt.Errorf("invalid --type %q: classic or consumer", typ)
		}
		client, err := a.consumerGroupsClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.ListConsumerGroups(ctx, req)
		if err != nil {
			return err
		}
		if state != "" && !strings.EqualFold(state, allStates) {
			var want []string
			for _, s := range strings.Split(state, ",") {
				want = append(want, strings.ToLower(strings.TrimSpace(s)))
			}
			resp.Groups = slices.DeleteFunc(resp.Groups, func(g *sharelogv1.ConsumerGroupListing) bool {
				return !slices.Contains(want, strings.ToLower(g.GetState()))
			})
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		if state == "" {
			for _, g := range resp.GetGroups() {
				fmt.Fprintln(a.stdout, g.GetGroup())
			}
			return nil
		}
		tw := newTable(a)
		fmt.Fprintln(tw, "GROUP\tTYPE\tSTATE\t#MEMBERS")
		for _, g := range resp.GetGroups() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", g.GetGroup(), groupTypeName(g.GetType()), g.GetState(), g.GetMemberCount())
		}
		return tw.Flush()
	})
	return cmd
}

func groupTypeName(t sharelogv1.ConsumerGroupType) string {
	switch t {
	case sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_CLASSIC:
		return "classic"
	case sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_CONSUMER:
		return "consumer"
	}
	return missingValue
}

func (a *app) cgDescribeCmd() *cobra.Command {
	var offsets, members, state bool
	cmd := &cobra.Command{
		Use:   "describe GROUP",
		Short: "Describe a consumer group's offsets and lag (default), members or state",
		Long: `Describe a consumer group, with the columns of kafka-consumer-groups.sh --describe:

  --offsets (default)  GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
                       per partition the group has committed an offset for or a member is
                       assigned; "-" where there is none (no commit: no lag)
  --members            GROUP CONSUMER-ID GROUP-INSTANCE-ID HOST CLIENT-ID #PARTITIONS
                       (--verbose adds ASSIGNMENT)
  --state              GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS

With -o json: FetchOffsets' answer for --offsets, DescribeConsumerGroup's otherwise.`,
		Example: `  sharelogctl consumer-groups describe orders-app
  sharelogctl consumer-groups describe orders-app --members -v
  sharelogctl consumer-groups describe orders-app --state -o json`,
		Args: cobra.ExactArgs(1),
	}
	f := cmd.Flags()
	f.BoolVar(&offsets, "offsets", false, "describe committed offsets and lag (the default)")
	f.BoolVar(&members, "members", false, "describe the members and their assignments")
	f.BoolVar(&state, "state", false, "describe the group's state")
	cmd.MarkFlagsMutuallyExclusive("offsets", "members", "state")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		group := args[0]
		client, err := a.consumerGroupsClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		d, err := client.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: group})
		if err != nil {
			return err
		}
		switch {
		case members:
			if a.jsonOutput() {
				return a.printJSON(d)
			}
			return a.printCGMembers(d)
		case state:
			if a.jsonOutput() {
				return a.printJSON(d)
			}
			tw := newTable(a)
			fmt.Fprintln(tw, "GROUP\tCOORDINATOR (ID)\tASSIGNMENT-STRATEGY\tSTATE\t#MEMBERS")
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", d.GetGroup(), a.coordinatorOf(ctx, group), orMissing(d.GetProtocol()), d.GetState(), len(d.GetMembers()))
			return tw.Flush()
		}
		return a.describeCGOffsets(ctx, client, d)
	})
	return cmd
}

func (a *app) printCGMembers(d *sharelogv1.DescribeConsumerGroupResponse) error {
	if len(d.GetMembers()) == 0 {
		fmt.Fprintf(a.stderr, "Consumer group '%s' has no active members.\n", d.GetGroup())
	}
	tw := newTable(a)
	header := "GROUP\tCONSUMER-ID\tGROUP-INSTANCE-ID\tHOST\tCLIENT-ID\t#PARTITIONS"
	if a.verbose {
		header += "\tASSIGNMENT"
	}
	fmt.Fprintln(tw, header)
	for _, m := range d.GetMembers() {
		n := 0
		var parts []string
		for _, tp := range m.GetAssignment() {
			n += len(tp.GetPartitions())
			ps := make([]string, len(tp.GetPartitions()))
			for i, p := range tp.GetPartitions() {
				ps[i] = strconv.Itoa(int(p))
			}
			parts = append(parts, tp.GetTopic()+"("+strings.Join(ps, ",")+")")
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d", d.GetGroup(), m.GetMemberId(), orMissing(m.GetGroupInstanceId()),
			orMissing(m.GetClientHost()), orMissing(m.GetClientId()), n)
		if a.verbose {
			line += "\t" + orMissing(strings.Join(parts, ","))
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// cgRow is one line of describe --offsets.
type cgRow struct {
	topic     string
	partition int32
	offset    *sharelogv1.ConsumerGroupPartitionOffset
	member    *sharelogv1.ConsumerGroupMember
}

// describeCGOffsets prints kafka-consumer-groups.sh --describe: every
// partition with a committed offset, and every partition assigned to a
// member (committed or not), with its member.
func (a *app) describeCGOffsets(ctx context.Context, client sharelogv1.ConsumerGroupServiceClient, d *sharelogv1.DescribeConsumerGroupResponse) error {
	group := d.GetGroup()
	committed, err := client.FetchOffsets(ctx, &sharelogv1.FetchOffsetsRequest{Group: group})
	if err != nil {
		return err
	}
	if a.jsonOutput() {
		return a.printJSON(committed)
	}
	rows := map[resetTP]*cgRow{}
	row := func(topic string, p int32) *cgRow {
		k := resetTP{topic, p}
		if rows[k] == nil {
			rows[k] = &cgRow{topic: topic, partition: p}
		}
		return rows[k]
	}
	var assignedTopics []string
	for _, m := range d.GetMembers() {
		for _, tp := range m.GetAssignment() {
			if !slices.Contains(assignedTopics, tp.GetTopic()) {
				assignedTopics = append(assignedTopics, tp.GetTopic())
			}
			for _, p := range tp.GetPartitions() {
				row(tp.GetTopic(), p).member = m
			}
		}
	}
	add := func(resp *sharelogv1.FetchOffsetsResponse, assignedOnly bool) {
		for _, t := range resp.GetTopics() {
			for _, p := range t.GetPartitions() {
				if p.GetPartition() < 0 {
					continue // a topic gone or refused
				}
				if assignedOnly && rows[resetTP{t.GetTopic(), p.GetPartition()}] == nil {
					continue
				}
				row(t.GetTopic(), p.GetPartition()).offset = p
			}
		}
	}
	add(committed, false)
	if len(assignedTopics) > 0 { // the log end offsets of assigned partitions without a commit
		all, err := client.FetchOffsets(ctx, &sharelogv1.FetchOffsetsRequest{Group: group, Topics: assignedTopics})
		if err != nil {
			return err
		}
		add(all, true)
	}
	if len(d.GetMembers()) == 0 {
		fmt.Fprintf(a.stderr, "Consumer group '%s' has no active members.\n", group)
	}
	sorted := make([]*cgRow, 0, len(rows))
	for _, r := range rows {
		sorted = append(sorted, r)
	}
	slices.SortFunc(sorted, func(x, y *cgRow) int {
		return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition))
	})
	tw := newTable(a)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tHOST\tCLIENT-ID")
	for _, r := range sorted {
		cur, end, lag := missingValue, missingValue, missingValue
		if o := r.offset; o != nil {
			cur, end = offsetOrMissing(o.GetCommittedOffset()), offsetOrMissing(o.GetLogEndOffset())
			if o.Lag != nil {
				lag = strconv.FormatInt(o.GetLag(), 10)
			}
		}
		id, host, client := missingValue, missingValue, missingValue
		if m := r.member; m != nil {
			id, host, client = orMissing(m.GetMemberId()), orMissing(m.GetClientHost()), orMissing(m.GetClientId())
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", group, r.topic, r.partition, cur, end, lag, id, host, client)
	}
	return tw.Flush()
}

type cgResetOptions struct {
	toEarliest, toLatest bool
	toDatetime           string
	toOffset, shiftBy    int64
	topics               []string
	allTopics            bool
	dryRun, execute      bool
}

func (a *app) cgResetOffsetsCmd() *cobra.Command {
	var o cgResetOptions
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP (--to-earliest|--to-latest|--to-datetime T|--to-offset N|--shift-by N) (--topic T[:P,...]|--all-topics) [--dry-run|--execute]",
		Short: "Reset a consumer group's committed offsets (dry run unless --execute)",
		Long: `Compute new committed offsets for a consumer group and, with --execute, write them
(AlterOffsets). Without --execute (or with --dry-run) the server only plans them; nothing
changes. Every new offset is clamped into [log start offset, log end offset], as Kafka's tool.

Targets:
  --to-earliest        the log start offset
  --to-latest          the log end offset
  --to-datetime T      the first offset whose timestamp is at or after T, ISO-8601 as Kafka's
                       YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone (Z, +01:00); without a
                       zone T is local time; the log end offset when there is none
  --to-offset N        N
  --shift-by N         the committed offset + N (N may be negative); a partition without a
                       committed offset fails

Scope:
  --topic T            every partition of T; T:0,2 only those partitions (repeatable)
  --all-topics         every topic the group has committed offsets for

The group must have no members (NON_EMPTY_GROUP otherwise, dry run or not). The plan is
printed as GROUP TOPIC PARTITION NEW-OFFSET.`,
		Example: `  sharelogctl consumer-groups reset-offsets orders-app --topic orders --to-earliest
  sharelogctl consumer-groups reset-offsets orders-app --all-topics --to-latest --execute
  sharelogctl consumer-groups reset-offsets orders-app --topic orders:0,1 --shift-by -10 --execute`,
		Args: cobra.ExactArgs(1),
	}
	f := cmd.Flags()
	f.BoolVar(&o.toEarliest, "to-earliest", false, "reset to the log start offset")
	f.BoolVar(&o.toLatest, "to-latest", false, "reset to the log end offset")
	f.StringVar(&o.toDatetime, "to-datetime", "", "reset to the first offset at or after this time (YYYY-MM-DDTHH:mm:SS.sss)")
	f.Int64Var(&o.toOffset, "to-offset", 0, "reset to this offset")
	f.Int64Var(&o.shiftBy, "shift-by", 0, "move the committed offset by this many (negative: back)")
	f.StringArrayVar(&o.topics, "topic", nil, "topic, or topic:partition,partition (repeatable)")
	f.BoolVar(&o.allTopics, "all-topics", false, "every topic the group has committed offsets for")
	f.BoolVar(&o.dryRun, "dry-run", false, "only print the plan (the default)")
	f.BoolVar(&o.execute, "execute", false, "write the new offsets")
	targets := []string{"to-earliest", "to-latest", "to-datetime", "to-offset", "shift-by"}
	cmd.MarkFlagsOneRequired(targets...)
	cmd.MarkFlagsMutuallyExclusive(targets...)
	cmd.MarkFlagsOneRequired("topic", "all-topics")
	cmd.MarkFlagsMutuallyExclusive("topic", "all-topics")
	cmd.MarkFlagsMutuallyExclusive("dry-run", "execute")
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		return a.cgResetOffsets(cmd, args[0], o)
	})
	return cmd
}

func (a *app) cgResetOffsets(cmd *cobra.Command, group string, o cgResetOptions) error {
	base := &sharelogv1.AlterOffsetsTopic{}
	switch {
	case o.toEarliest:
		base.ResetTo = sharelogv1.OffsetReset_OFFSET_RESET_EARLIEST
	case o.toLatest:
		base.ResetTo = sharelogv1.OffsetReset_OFFSET_RESET_LATEST
	case o.toDatetime != "":
		t, err := parseDateTime(o.toDatetime)
		if err != nil {
			return err
		}
		base.ResetTo, base.TimestampMs = sharelogv1.OffsetReset_OFFSET_RESET_TIMESTAMP, t.UnixMilli()
	case cmd.Flags().Changed("to-offset"):
		base.ResetTo, base.Offset = sharelogv1.OffsetReset_OFFSET_RESET_OFFSET, o.toOffset
	default:
		base.ResetTo, base.ShiftBy = sharelogv1.OffsetReset_OFFSET_RESET_SHIFT_BY, o.shiftBy
	}
	client, err := a.consumerGroupsClient()
	if err != nil {
		return err
	}
	ctx, cancel := a.callCtx(cmd.Context())
	defer cancel()
	req := &sharelogv1.AlterOffsetsRequest{Group: group, DryRun: !o.execute}
	entry := func(topic string, parts []int32) {
		t := &sharelogv1.AlterOffsetsTopic{Topic: topic, Partitions: parts, ResetTo: base.ResetTo,
			TimestampMs: base.TimestampMs, Offset: base.Offset, ShiftBy: base.ShiftBy}
		req.Topics = append(req.Topics, t)
	}
	if o.allTopics {
		committed, err := client.FetchOffsets(ctx, &sharelogv1.FetchOffsetsRequest{Group: group})
		if err != nil {
			return err
		}
		for _, t := range committed.GetTopics() {
			entry(t.GetTopic(), nil)
		}
		if len(req.Topics) == 0 {
			return fmt.Errorf("group %q has no committed offsets: name the topics with --topic", group)
		}
	} else {
		for _, arg := range o.topics {
			topic, parts, hasParts := strings.Cut(arg, ":")
			if topic == "" {
				return fmt.Errorf("invalid --topic %q: expected a topic name, or topic:partition,partition", arg)
			}
			var ps []int32
			if hasParts {
				for _, s := range strings.Split(parts, ",") {
					p, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
					if err != nil || p < 0 {
						return fmt.Errorf("invalid partition %q in --topic %q", s, arg)
					}
					ps = append(ps, int32(p))
				}
			}
			entry(topic, ps)
		}
	}
	resp, err := client.AlterOffsets(ctx, req)
	if err != nil {
		return err
	}
	if a.jsonOutput() {
		return a.printJSON(resp)
	}
	tw := newTable(a)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tNEW-OFFSET")
	var failed []string
	total := 0
	for _, t := range resp.GetTopics() {
		for _, p := range t.GetPartitions() {
			total++
			if p.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				failed = append(failed, fmt.Sprintf("%s/%d: %s (%s)", t.GetTopic(), p.GetPartition(), p.GetErrorMessage(), errorCodeName(p.GetErrorCode())))
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", group, t.GetTopic(), p.GetPartition(), p.GetOffset())
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("reset failed for %d of %s: %s", len(failed), plural(total, "partition", "partitions"), strings.Join(failed, "; "))
	}
	return nil
}

func (a *app) cgDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete GROUP",
		Short: "Delete a consumer group without members, and its committed offsets",
		Long: `Delete a consumer group without members: its committed offsets go, and the id may later
be used for a new group (NON_EMPTY_GROUP while it has members).`,
		Example: `  sharelogctl consumer-groups delete orders-app`,
		Args:    cobra.ExactArgs(1),
	}
	cmd.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		client, err := a.consumerGroupsClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.DeleteConsumerGroup(ctx, &sharelogv1.DeleteConsumerGroupRequest{Group: args[0]})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		_, err = fmt.Fprintf(a.stdout, "Deletion of requested consumer groups ('%s') was successful.\n", args[0])
		return err
	})
	return cmd
}
