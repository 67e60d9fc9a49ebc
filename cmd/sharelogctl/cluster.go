package main

import (
	"fmt"

	"github.com/spf13/cobra"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func (a *app) clusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "cluster",
		Short:   "Describe the cluster: instances, partition owners, group coordinators",
		Example: `  sharelogctl cluster describe`,
	}
	cmd.AddCommand(a.clusterDescribeCmd())
	return cmd
}

func (a *app) clusterDescribeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "List the instances, each partition's owner and each share group's coordinator",
		Long: `Describe the cluster as the server sees it now. The first line gives the mode: "single"
(--store=file, one instance owns everything), "active-standby" (--store=jetstream: the active
instance owns everything, the others forward to it) or "partitioned" (each partition has its own
owner and each share group its own coordinator). Then three tables: the live instances with
their gRPC and HTTP addresses; each partition's owner and owner epoch (the epoch grows when
ownership changes hands); each share group's coordinator. Topics and groups you may not
describe are left out.`,
		Example: `  sharelogctl cluster describe
  sharelogctl cluster describe -o json | jq -r '.partitions[] | "\(.topic)/\(.partition) \(.ownerId)"'`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = a.runE(func(cmd *cobra.Command, _ []string) error {
		client, err := a.logClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		fmt.Fprintf(a.stdout, "Mode: %s\n\n", resp.GetMode())
		tw := newTable(a)
		fmt.Fprintln(tw, "INSTANCE\tGRPC ADDRESS\tHTTP ADDRESS")
		for _, in := range resp.GetInstances() {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", in.GetInstanceId(), in.GetGrpcAddress(), dash(in.GetHttpAddress()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(a.stdout)
		tw = newTable(a)
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tOWNER\tEPOCH")
		for _, p := range resp.GetPartitions() {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", p.GetTopic(), p.GetPartition(), dash(p.GetOwnerId()), p.GetEpoch())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(a.stdout)
		tw = newTable(a)
		fmt.Fprintln(tw, "GROUP\tCOORDINATOR\tEPOCH")
		for _, g := range resp.GetGroups() {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", g.GetGroupId(), dash(g.GetCoordinatorId()), g.GetEpoch())
		}
		return tw.Flush()
	})
	return cmd
}

// dash shows an empty value as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
