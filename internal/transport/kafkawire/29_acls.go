package kafkawire

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
)

// DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) over the binding
// store of the AclService (authz.ACL), needing DESCRIBE and ALTER on the
// CLUSTER as in Kafka. Kafka's enums map one to one onto the store's model
// (docs/kafka.md "ACL APIs"); what the model cannot hold (resource types
// TRANSACTIONAL_ID, DELEGATION_TOKEN, USER; operations CLUSTER_ACTION,
// IDEMPOTENT_WRITE and later; a host other than "*") is INVALID_REQUEST.
// Without --authorizer acl they answer SECURITY_DISABLED.

func init() {
	aclHandlers[29] = handler{1, 3, (*Listener).handleDescribeAcls}
	aclHandlers[30] = handler{1, 3, (*Listener).handleCreateAcls}
	aclHandlers[31] = handler{1, 3, (*Listener).handleDeleteAcls}
}

// aclHandlers are added to every listener.
var aclHandlers = map[int16]handler{}

var (
	kResourceTypes = map[kmsg.ACLResourceType]authz.ResourceType{kmsg.ACLResourceTypeAny: authz.AnyResource,
		kmsg.ACLResourceTypeTopic: authz.Topic, kmsg.ACLResourceTypeGroup: authz.Group, kmsg.ACLResourceTypeCluster: authz.Cluster,
		kmsg.ACLResourceTypeTransactionalId: authz.TransactionalID}
	kPatternTypes = map[kmsg.ACLResourcePatternType]authz.PatternType{kmsg.ACLResourcePatternTypeAny: authz.AnyPattern,
		kmsg.ACLResourcePatternTypeMatch: authz.Match, kmsg.ACLResourcePatternTypeLiteral: authz.Literal, kmsg.ACLResourcePatternTypePrefixed: authz.Prefixed}
	kOperations = map[kmsg.ACLOperation]authz.Operation{kmsg.ACLOperationAny: authz.AnyOperation, kmsg.ACLOperationAll: authz.All,
		kmsg.ACLOperationRead: authz.Read, kmsg.ACLOperationWrite: authz.Write, kmsg.ACLOperationCreate: authz.Create,
		kmsg.ACLOperationDelete: authz.Delete, kmsg.ACLOperationAlter: authz.Alter, kmsg.ACLOperationDescribe: authz.Describe,
		kmsg.ACLOperationDescribeConfigs: authz.DescribeConfigs, kmsg.ACLOperationAlterConfigs: authz.AlterConfigs}
	kPermissions = map[kmsg.ACLPermissionType]authz.Permission{kmsg.ACLPermissionTypeAny: authz.AnyPermission,
		kmsg.ACLPermissionTypeDeny: authz.Deny, kmsg.ACLPermissionTypeAllow: authz.Allow}
)

func reverse[K comparable, V comparable](m map[K]V) map[V]K {
	out := make(map[V]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

var (
	rResourceTypes = reverse(kResourceTypes)
	rPatternTypes  = reverse(kPatternTypes)
	rOperations    = reverse(kOperations)
	rPermissions   = reverse(kPermissions)
)

// aclFilter maps Kafka's filter fields; a nil principal or name is "any".
func aclFilter(rt kmsg.ACLResourceType, name *string, pt kmsg.ACLResourcePatternType, principal, host *string, op kmsg.ACLOperation, pm kmsg.ACLPermissionType) (authz.Filter, error) {
	var f authz.Filter
	var ok [4]bool
	f.ResourceType, ok[0] = kResourceTypes[rt]
	f.PatternType, ok[1] = kPatternTypes[pt]
	f.Operation, ok[2] = kOperations[op]
	f.Permission, ok[3] = kPermissions[pm]
	if !ok[0] || !ok[1] || !ok[2] || !ok[3] {
		return f, fmt.Errorf("resource type %d, pattern type %d, operation %d or permission %d cannot be represented (docs/kafka.md \"ACL APIs\")", rt, pt, op, pm)
	}
	if host != nil && *host != "*" {
		return f, fmt.Errorf("host %q: bindings apply to every host, only \"*\" is served", *host)
	}
	if name != nil {
		f.ResourceName = *name
	}
	if principal != nil {
		f.Principal = *principal
	}
	return f, f.Validate()
}

// aclsUsable is SECURITY_DISABLED unless bindings are enforced, then the
// CLUSTER permission op.
func (l *Listener) aclsUsable(ctx context.Context, op authz.Operation) (int16, *string) {
	if l.cfg.ACL == nil || !l.cfg.Guard.Enforcing() {
		msg := "no authorizer is configured (--authorizer acl)"
		return kerr.SecurityDisabled.Code, &msg
	}
	if err := l.require(ctx, op, authz.Cluster, authz.ClusterName); err != nil {
		msg := err.Error()
		return kerr.ClusterAuthorizationFailed.Code, &msg
	}
	return 0, nil
}

func errMsg(err error) *string {
	msg := err.Error()
	return &msg
}

func (l *Listener) handleDescribeAcls(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeACLsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	if resp.ErrorCode, resp.ErrorMessage = l.aclsUsable(ctx, authz.Describe); resp.ErrorCode != 0 {
		return resp, nil
	}
	f, err := aclFilter(req.ResourceType, req.ResourceName, req.ResourcePatternType, req.Principal, req.Host, req.Operation, req.PermissionType)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, errMsg(err)
		return resp, nil
	}
	bs, err := l.cfg.ACL.Describe(f)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, errMsg(err)
		return resp, nil
	}
	for _, b := range bs {
		r := kmsg.NewDescribeACLsResponseResource()
		r.ResourceType, r.ResourceName, r.ResourcePatternType = rResourceTypes[b.ResourceType], b.ResourceName, rPatternTypes[b.PatternType]
		a := kmsg.NewDescribeACLsResponseResourceACL()
		a.Principal, a.Host, a.Operation, a.PermissionType = b.Principal, "*", rOperations[b.Operation], rPermissions[b.Permission]
		r.ACLs = []kmsg.DescribeACLsResponseResourceACL{a}
		resp.Resources = append(resp.Resources, r)
	}
	return resp, nil
}

func (l *Listener) handleCreateAcls(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.CreateACLsRequest)
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	code, msg := l.aclsUsable(ctx, authz.Alter)
	var bs []authz.Binding
	var idx []int
	for i, c := range req.Creations {
		resp.Results[i] = kmsg.NewCreateACLsResponseResult()
		if code != 0 {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, msg
			continue
		}
		f, err := aclFilter(c.ResourceType, &c.ResourceName, c.ResourcePatternType, &c.Principal, &c.Host, c.Operation, c.PermissionType)
		b := authz.Binding(f)
		if err == nil {
			err = b.Validate()
		}
		if err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.InvalidRequest.Code, errMsg(err)
			continue
		}
		bs, idx = append(bs, b), append(idx, i)
	}
	if len(bs) == 0 {
		return resp, nil
	}
	perItem, err := l.cfg.ACL.Create(ctx, bs)
	l.cfg.Guard.Changed(ctx, "CreateAcls", authz.Cluster, authz.ClusterName, err)
	for j, i := range idx {
		e := err
		if e == nil && j < len(perItem) {
			e = perItem[j]
		}
		if e != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errorCode(e), errMsg(e)
		}
	}
	return resp, nil
}

func (l *Listener) handleDeleteAcls(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteACLsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	code, msg := l.aclsUsable(ctx, authz.Alter)
	var fs []authz.Filter
	var idx []int
	for i, kf := range req.Filters {
		resp.Results[i] = kmsg.NewDeleteACLsResponseResult()
		if code != 0 {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, msg
			continue
		}
		f, err := aclFilter(kf.ResourceType, kf.ResourceName, kf.ResourcePatternType, kf.Principal, kf.Host, kf.Operation, kf.PermissionType)
		if err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.InvalidRequest.Code, errMsg(err)
			continue
		}
		fs, idx = append(fs, f), append(idx, i)
	}
	if len(fs) == 0 {
		return resp, nil
	}
	res, err := l.cfg.ACL.Delete(ctx, fs)
	l.cfg.Guard.Changed(ctx, "DeleteAcls", authz.Cluster, authz.ClusterName, err)
	for j, i := range idx {
		switch {
		case err != nil:
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errorCode(err), errMsg(err)
		case res[j].Err != nil:
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.InvalidRequest.Code, errMsg(res[j].Err)
		default:
			for _, b := range res[j].Matched {
				m := kmsg.NewDeleteACLsResponseResultMatchingACL()
				m.ResourceType, m.ResourceName, m.ResourcePatternType = rResourceTypes[b.ResourceType], b.ResourceName, rPatternTypes[b.PatternType]
				m.Principal, m.Host, m.Operation, m.PermissionType = b.Principal, "*", rOperations[b.Operation], rPermissions[b.Permission]
				resp.Results[i].MatchingACLs = append(resp.Results[i].MatchingACLs, m)
			}
		}
	}
	return resp, nil
}
