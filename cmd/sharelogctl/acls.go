package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// aclFlags are kafka-acls.sh's words for principals, operations and resources.
type aclFlags struct {
	allow, deny []string // --allow-principal, --deny-principal
	principal   string   // --principal (list)
	operations  []string
	topics      []string
	groups      []string
	txnIDs      []string
	cluster     bool
	patternType string
}

func (f *aclFlags) register(cmd *cobra.Command, list bool) {
	fl := cmd.Flags()
	if list {
		fl.StringVar(&f.principal, "principal", "", "only bindings of this principal (User:<name> or User:*)")
	} else {
		fl.StringArrayVar(&f.allow, "allow-principal", nil, "principal to ALLOW (User:<name>, or User:* for everyone); repeatable")
		fl.StringArrayVar(&f.deny, "deny-principal", nil, "principal to DENY; repeatable")
		fl.StringArrayVar(&f.operations, "operation", nil,
			"Read, Write, Create, Delete, Alter, Describe, AlterConfigs, DescribeConfigs or All; repeatable")
	}
	fl.StringArrayVar(&f.topics, "topic", nil, "topic name (or prefix with --resource-pattern-type prefixed, or * for every topic); repeatable")
	fl.StringArrayVar(&f.groups, "group", nil, "share group id (or prefix, or *); repeatable")
	fl.StringArrayVar(&f.txnIDs, "transactional-id", nil, "Kafka transactional id (or prefix, or *); repeatable")
	fl.BoolVar(&f.cluster, "cluster", false, "the cluster resource")
	fl.StringVar(&f.patternType, "resource-pattern-type", "literal", "literal or prefixed; listing and removing also take any and match")
}

type aclResource struct {
	rt   sharelogv1.ResourceType
	name string
}

func (f *aclFlags) resources() []aclResource {
	var out []aclResource
	for _, t := range f.topics {
		out = append(out, aclResource{sharelogv1.ResourceType_RESOURCE_TYPE_TOPIC, t})
	}
	for _, g := range f.groups {
		out = append(out, aclResource{sharelogv1.ResourceType_RESOURCE_TYPE_GROUP, g})
	}
	for _, id := range f.txnIDs {
		out = append(out, aclResource{sharelogv1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID, id})
	}
	if f.cluster {
		out = append(out, aclResource{sharelogv1.ResourceType_RESOURCE_TYPE_CLUSTER, clusterResourceName})
	}
	return out
}

func (f *aclFlags) pattern(filter bool) (sharelogv1.PatternType, error) {
	switch strings.ToLower(f.patternType) {
	case "literal":
		return sharelogv1.PatternType_PATTERN_TYPE_LITERAL, nil
	case "prefixed":
		return sharelogv1.PatternType_PATTERN_TYPE_PREFIXED, nil
	case "any":
		if filter {
			return sharelogv1.PatternType_PATTERN_TYPE_UNSPECIFIED, nil
		}
	case "match":
		if filter {
			return sharelogv1.PatternType_PATTERN_TYPE_MATCH, nil
		}
	}
	if filter {
		return 0, fmt.Errorf("--resource-pattern-type must be literal, prefixed, any or match, got %q", f.patternType)
	}
	return 0, fmt.Errorf("--resource-pattern-type must be literal or prefixed when adding, got %q", f.patternType)
}

// ops parses --operation; none given is ALL for add, any for remove.
func (f *aclFlags) ops(add bool) ([]sharelogv1.AclOperation, error) {
	if len(f.operations) == 0 {
		if add {
			return []sharelogv1.AclOperation{sharelogv1.AclOperation_ACL_OPERATION_ALL}, nil
		}
		return []sharelogv1.AclOperation{sharelogv1.AclOperation_ACL_OPERATION_UNSPECIFIED}, nil
	}
	var out []sharelogv1.AclOperation
	for _, o := range f.operations {
		op, err := parseOperation(o)
		if err != nil {
			return nil, fmt.Errorf("--operation: %w", err)
		}
		out = append(out, op)
	}
	return out, nil
}

type principalPerm struct {
	principal string
	perm      sharelogv1.AclPermission
}

func (f *aclFlags) principals() []principalPerm {
	var out []principalPerm
	for _, p := range f.allow {
		out = append(out, principalPerm{p, sharelogv1.AclPermission_ACL_PERMISSION_ALLOW})
	}
	for _, p := range f.deny {
		out = append(out, principalPerm{p, sharelogv1.AclPermission_ACL_PERMISSION_DENY})
	}
	return out
}

func (a *app) aclClient() (sharelogv1.AclServiceClient, error) {
	if _, err := a.logClient(); err != nil { // dials once
		return nil, err
	}
	return sharelogv1.NewAclServiceClient(a.conn), nil
}

func (a *app) aclsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acls",
		Short: "Add, list and remove ACL bindings (server started with --authorizer acl)",
		Long: `Manage the access-control bindings with kafka-acls.sh's words. A binding lets (ALLOW)
or forbids (DENY) a principal an operation on topics, share groups or the cluster; DENY wins,
and without a matching binding a request is refused. See docs/security.md.`,
		Example: `  sharelogctl acls add --allow-principal User:alice --operation Write --operation Describe --topic orders
  sharelogctl acls add --allow-principal User:bob --operation Read --topic orders. --resource-pattern-type prefixed --group billing
  sharelogctl acls add --deny-principal User:* --operation Delete --topic '*'
  sharelogctl acls list --topic orders --resource-pattern-type match
  sharelogctl acls remove --allow-principal User:alice --operation Write --topic orders`,
	}
	cmd.AddCommand(a.aclsAddCmd(), a.aclsListCmd(), a.aclsRemoveCmd())
	return cmd
}

func (a *app) aclsAddCmd() *cobra.Command {
	var f aclFlags
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add one binding per principal, operation and resource given",
		Long: `Add bindings: every --allow-principal and --deny-principal, with every --operation
(default All), on every --topic, --group and --cluster given.`,
		Args: cobra.NoArgs,
	}
	f.register(cmd, false)
	cmd.RunE = a.runE(func(cmd *cobra.Command, _ []string) error {
		pt, err := f.pattern(false)
		if err != nil {
			return err
		}
		ops, err := f.ops(true)
		if err != nil {
			return err
		}
		res, pps := f.resources(), f.principals()
		if len(res) == 0 || len(pps) == 0 {
			return errors.New("add needs --allow-principal or --deny-principal, and --topic, --group or --cluster")
		}
		req := &sharelogv1.CreateAclsRequest{}
		for _, pp := range pps {
			for _, op := range ops {
				for _, r := range res {
					req.Bindings = append(req.Bindings, &sharelogv1.AclBinding{Principal: pp.principal, ResourceType: r.rt, PatternType: pt,
						ResourceName: r.name, Operation: op, Permission: pp.perm})
				}
			}
		}
		client, err := a.aclClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.CreateAcls(ctx, req)
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		var failed []string
		for i, r := range resp.GetResults() {
			if r.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				failed = append(failed, fmt.Sprintf("%s: %s", bindingText(req.Bindings[i]), r.GetErrorMessage()))
				continue
			}
			fmt.Fprintf(a.stdout, "added %s\n", bindingText(req.Bindings[i]))
		}
		if len(failed) > 0 {
			return fmt.Errorf("%d of %d bindings refused: %s (INVALID_REQUEST)", len(failed), len(req.Bindings), strings.Join(failed, "; "))
		}
		return nil
	})
	return cmd
}

// filters is one filter per resource given (or one for every resource),
// per principal given (or any), per operation given (or any).
func (f *aclFlags) filters(add bool) ([]*sharelogv1.AclBindingFilter, error) {
	pt, err := f.pattern(true)
	if err != nil {
		return nil, err
	}
	ops, err := f.ops(add)
	if err != nil {
		return nil, err
	}
	res := f.resources()
	if len(res) == 0 {
		res = []aclResource{{}}
	}
	pps := f.principals()
	if f.principal != "" {
		pps = append(pps, principalPerm{principal: f.principal})
	}
	if len(pps) == 0 {
		pps = []principalPerm{{}}
	}
	var out []*sharelogv1.AclBindingFilter
	for _, pp := range pps {
		for _, op := range ops {
			for _, r := range res {
				p := pt
				if r.rt == sharelogv1.ResourceType_RESOURCE_TYPE_UNSPECIFIED && pt == sharelogv1.PatternType_PATTERN_TYPE_LITERAL && f.patternType == "literal" {
					p = sharelogv1.PatternType_PATTERN_TYPE_UNSPECIFIED // no resource named: any binding
				}
				out = append(out, &sharelogv1.AclBindingFilter{Principal: pp.principal, ResourceType: r.rt, PatternType: p,
					ResourceName: r.name, Operation: op, Permission: pp.perm})
			}
		}
	}
	return out, nil
}

func (a *app) aclsListCmd() *cobra.Command {
	var f aclFlags
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List bindings, all or those of the resources and principal given",
		Args:    cobra.NoArgs,
	}
	f.register(cmd, true)
	cmd.RunE = a.runE(func(cmd *cobra.Command, _ []string) error {
		filters, err := f.filters(false)
		if err != nil {
			return err
		}
		client, err := a.aclClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		out := &sharelogv1.DescribeAclsResponse{}
		seen := map[string]bool{}
		for _, flt := range filters {
			resp, err := client.DescribeAcls(ctx, &sharelogv1.DescribeAclsRequest{Filter: flt})
			if err != nil {
				return err
			}
			for _, b := range resp.GetBindings() {
				if k := bindingText(b); !seen[k] {
					seen[k] = true
					out.Bindings = append(out.Bindings, b)
				}
			}
		}
		if a.jsonOutput() {
			return a.printJSON(out)
		}
		tw := newTable(a)
		fmt.Fprintln(tw, "PRINCIPAL\tPERMISSION\tOPERATION\tRESOURCE TYPE\tPATTERN TYPE\tRESOURCE NAME")
		for _, b := range out.GetBindings() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", b.GetPrincipal(), enumText(b.GetPermission()), enumText(b.GetOperation()),
				enumText(b.GetResourceType()), enumText(b.GetPatternType()), b.GetResourceName())
		}
		return tw.Flush()
	})
	return cmd
}

func (a *app) aclsRemoveCmd() *cobra.Command {
	var f aclFlags
	cmd := &cobra.Command{
		Use:   "remove",
		Short: "Remove the bindings of the resources given (narrowed by principal and operation)",
		Long: `Remove every binding on the --topic, --group or --cluster resources given, narrowed to
the --allow-principal / --deny-principal and --operation values given (none = any).`,
		Args: cobra.NoArgs,
	}
	f.register(cmd, false)
	cmd.RunE = a.runE(func(cmd *cobra.Command, _ []string) error {
		if len(f.resources()) == 0 {
			return errors.New("remove needs --topic, --group or --cluster")
		}
		filters, err := f.filters(false)
		if err != nil {
			return err
		}
		client, err := a.aclClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.DeleteAcls(ctx, &sharelogv1.DeleteAclsRequest{Filters: filters})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		n := 0
		for _, r := range resp.GetResults() {
			if r.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				return fmt.Errorf("filter refused: %s (INVALID_REQUEST)", r.GetErrorMessage())
			}
			for _, b := range r.GetMatchingBindings() {
				fmt.Fprintf(a.stdout, "removed %s\n", bindingText(b))
				n++
			}
		}
		if n == 0 {
			fmt.Fprintln(a.stdout, "no binding matched")
		}
		return nil
	})
	return cmd
}

func bindingText(b *sharelogv1.AclBinding) string {
	return fmt.Sprintf("%s %s %s on %s %s %q", b.GetPrincipal(), enumText(b.GetPermission()), enumText(b.GetOperation()),
		enumText(b.GetPatternType()), enumText(b.GetResourceType()), b.GetResourceName())
}

// clusterResourceName is the one name of the cluster resource, as Kafka's
// (docs/security.md).
const clusterResourceName = "kafka-cluster"

// enumText is an AclService enum as kafka-acls.sh prints it: the value
// name without its type prefix, with UNSPECIFIED (a filter's wildcard)
// shown as ANY.
func enumText(e interface{ String() string }) string {
	name := e.String()
	for _, prefix := range []string{"ACL_PERMISSION_", "ACL_OPERATION_", "RESOURCE_TYPE_", "PATTERN_TYPE_"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			if rest == "UNSPECIFIED" {
				return "ANY"
			}
			return rest
		}
	}
	return name
}

// parseOperation reads an operation name as kafka-acls.sh writes it
// (case-insensitive, "-" or "_" between words: Read, DescribeConfigs,
// describe-configs).
func parseOperation(s string) (sharelogv1.AclOperation, error) {
	norm := strings.ToUpper(strings.NewReplacer("-", "", "_", "").Replace(s))
	var names []string
	for n := int32(1); ; n++ {
		name, ok := sharelogv1.AclOperation_name[n]
		if !ok {
			break
		}
		op := strings.TrimPrefix(name, "ACL_OPERATION_")
		names = append(names, op)
		if strings.ReplaceAll(op, "_", "") == norm {
			return sharelogv1.AclOperation(n), nil
		}
	}
	return 0, fmt.Errorf("unknown operation %q (want one of %s)", s, strings.Join(names, ", "))
}
