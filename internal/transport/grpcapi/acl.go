package grpcapi

// AclService behaviour (docs/security.md):
//   - CreateAcls and DeleteAcls need ALTER on the cluster, DescribeAcls
//     DESCRIBE on it (CLUSTER_AUTHORIZATION_FAILED otherwise).
//   - A binding or filter that is not valid answers INVALID_REQUEST in its
//     own result (DescribeAcls: as the request's error); the others apply.
//   - A change is saved before it is acknowledged; a failure to save
//     changes nothing and fails the whole call.
//   - Every change is one audit line per binding added or removed.

import (
	"context"
	"log/slog"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
)

// ACLs is what AclService needs from the binding keeper (*authz.ACL).
type ACLs interface {
	Create(ctx context.Context, bs []authz.Binding) ([]error, error)
	Describe(f authz.Filter) ([]authz.Binding, error)
	Delete(ctx context.Context, fs []authz.Filter) ([]authz.DeleteResult, error)
}

// AclService implements sharelogv1.AclServiceServer.
type AclService struct {
	sharelogv1.UnsafeAclServiceServer // compile error when an RPC is added

	acls        ACLs
	unavailable string // why there are no bindings to manage, when acls is nil
	guard       *authz.Guard
}

// NewAclService returns the AclService handlers over acls; when acls is
// nil every call answers INVALID_REQUEST with the message unavailable.
func NewAclService(acls ACLs, unavailable string, guard *authz.Guard) *AclService {
	return &AclService{acls: acls, unavailable: unavailable, guard: guard}
}

func (s *AclService) check(ctx context.Context, op authz.Operation) error {
	if err := s.guard.Require(ctx, op, authz.Cluster, authz.ClusterName); err != nil {
		return err
	}
	if s.acls == nil {
		return apierr.Invalid("%s", s.unavailable)
	}
	return nil
}

func (s *AclService) CreateAcls(ctx context.Context, req *sharelogv1.CreateAclsRequest) (*sharelogv1.CreateAclsResponse, error) {
	if err := s.check(ctx, authz.Alter); err != nil {
		return nil, err
	}
	bs := make([]authz.Binding, len(req.GetBindings()))
	for i, b := range req.GetBindings() {
		bs[i] = bindingFromProto(b)
	}
	perItem, err := s.acls.Create(ctx, bs)
	if err != nil {
		s.guard.Changed(ctx, "CreateAcls", authz.Cluster, authz.ClusterName, err)
		return nil, err
	}
	out := &sharelogv1.CreateAclsResponse{Results: make([]*sharelogv1.CreateAclResult, len(bs))}
	for i, e := range perItem {
		r := &sharelogv1.CreateAclResult{}
		if e != nil {
			r.ErrorCode, r.ErrorMessage = sharelogv1.ErrorCode_ERROR_CODE_INVALID_REQUEST, e.Error()
		} else {
			s.guard.Changed(ctx, "CreateAcls", authz.Cluster, authz.ClusterName, nil, slog.String("binding", bs[i].String()))
		}
		out.Results[i] = r
	}
	return out, nil
}

func (s *AclService) DescribeAcls(ctx context.Context, req *sharelogv1.DescribeAclsRequest) (*sharelogv1.DescribeAclsResponse, error) {
	if err := s.check(ctx, authz.Describe); err != nil {
		return nil, err
	}
	bs, err := s.acls.Describe(filterFromProto(req.GetFilter()))
	if err != nil {
		return nil, apierr.Invalid("filter: %v", err)
	}
	out := &sharelogv1.DescribeAclsResponse{Bindings: make([]*sharelogv1.AclBinding, len(bs))}
	for i, b := range bs {
		out.Bindings[i] = bindingToProto(b)
	}
	return out, nil
}

func (s *AclService) DeleteAcls(ctx context.Context, req *sharelogv1.DeleteAclsRequest) (*sharelogv1.DeleteAclsResponse, error) {
	if err := s.check(ctx, authz.Alter); err != nil {
		return nil, err
	}
	fs := make([]authz.Filter, len(req.GetFilters()))
	for i, f := range req.GetFilters() {
		fs[i] = filterFromProto(f)
	}
	res, err := s.acls.Delete(ctx, fs)
	if err != nil {
		s.guard.Changed(ctx, "DeleteAcls", authz.Cluster, authz.ClusterName, err)
		return nil, err
	}
	out := &sharelogv1.DeleteAclsResponse{Results: make([]*sharelogv1.DeleteAclsFilterResult, len(res))}
	for i, r := range res {
		fr := &sharelogv1.DeleteAclsFilterResult{}
		if r.Err != nil {
			fr.ErrorCode, fr.ErrorMessage = sharelogv1.ErrorCode_ERROR_CODE_INVALID_REQUEST, r.Err.Error()
		}
		for _, b := range r.Matched {
			fr.MatchingBindings = append(fr.MatchingBindings, bindingToProto(b))
			s.guard.Changed(ctx, "DeleteAcls", authz.Cluster, authz.ClusterName, nil, slog.String("binding", b.String()))
		}
		out.Results[i] = fr
	}
	return out, nil
}

// enumValue maps a protobuf enum number to the domain's, out-of-range
// numbers to one no validation accepts (the numbering is the same).
func enumValue[E ~int32](v E) uint8 {
	if v < 0 || v > 100 {
		return 255
	}
	return uint8(v)
}

func bindingFromProto(b *sharelogv1.AclBinding) authz.Binding {
	return authz.Binding{
		Principal:    b.GetPrincipal(),
		ResourceType: authz.ResourceType(enumValue(b.GetResourceType())),
		PatternType:  authz.PatternType(enumValue(b.GetPatternType())),
		ResourceName: b.GetResourceName(),
		Operation:    authz.Operation(enumValue(b.GetOperation())),
		Permission:   authz.Permission(enumValue(b.GetPermission())),
	}
}

func filterFromProto(f *sharelogv1.AclBindingFilter) authz.Filter {
	return authz.Filter{
		Principal:    f.GetPrincipal(),
		ResourceType: authz.ResourceType(enumValue(f.GetResourceType())),
		PatternType:  authz.PatternType(enumValue(f.GetPatternType())),
		ResourceName: f.GetResourceName(),
		Operation:    authz.Operation(enumValue(f.GetOperation())),
		Permission:   authz.Permission(enumValue(f.GetPermission())),
	}
}

func bindingToProto(b authz.Binding) *sharelogv1.AclBinding {
	return &sharelogv1.AclBinding{
		Principal:    b.Principal,
		ResourceType: sharelogv1.ResourceType(b.ResourceType),
		PatternType:  sharelogv1.PatternType(b.PatternType),
		ResourceName: b.ResourceName,
		Operation:    sharelogv1.AclOperation(b.Operation),
		Permission:   sharelogv1.AclPermission(b.Permission),
	}
}
