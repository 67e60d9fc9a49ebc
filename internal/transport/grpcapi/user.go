package grpcapi

// UserService behaviour (docs/security.md "SCRAM users"):
//   - SetScramCredential and DeleteScramCredential need ALTER on the
//     cluster, ListUsers DESCRIBE on it (CLUSTER_AUTHORIZATION_FAILED
//     otherwise), as Kafka's AlterUserScramCredentials and
//     DescribeUserScramCredentials do.
//   - The rules of a credential are internal/users' (iterations, names,
//     mechanisms); its reasons pass through.
//   - Every change is one audit line naming the user and the mechanism
//     (never the password).

import (
	"context"
	"log/slog"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/users"
)

// UserService implements sharelogv1.UserServiceServer over the SCRAM users.
type UserService struct {
	sharelogv1.UnsafeUserServiceServer // compile error when an RPC is added

	users *users.Users
	guard *authz.Guard
}

// NewUserService returns the UserService handlers over u.
func NewUserService(u *users.Users, guard *authz.Guard) *UserService {
	return &UserService{users: u, guard: guard}
}

func userToProto(u users.User) *sharelogv1.User {
	out := &sharelogv1.User{Name: u.Name}
	for _, m := range u.Mechanisms {
		out.Credentials = append(out.Credentials, &sharelogv1.ScramCredentialInfo{Mechanism: m.Mechanism, Iterations: int32(m.Iterations)})
	}
	return out
}

func (s *UserService) ListUsers(ctx context.Context, _ *sharelogv1.ListUsersRequest) (*sharelogv1.ListUsersResponse, error) {
	if err := s.guard.Require(ctx, authz.Describe, authz.Cluster, authz.ClusterName); err != nil {
		return nil, err
	}
	all, err := s.users.List(ctx)
	if err != nil {
		return nil, err
	}
	out := &sharelogv1.ListUsersResponse{Users: make([]*sharelogv1.User, len(all))}
	for i, u := range all {
		out.Users[i] = userToProto(u)
	}
	return out, nil
}

func (s *UserService) SetScramCredential(ctx context.Context, req *sharelogv1.SetScramCredentialRequest) (*sharelogv1.SetScramCredentialResponse, error) {
	if err := s.guard.Require(ctx, authz.Alter, authz.Cluster, authz.ClusterName); err != nil {
		return nil, err
	}
	var err error
	switch sec := req.GetSecret().(type) {
	case *sharelogv1.SetScramCredentialRequest_Password:
		err = s.users.SetPassword(ctx, req.GetUser(), req.GetMechanism(), sec.Password, int(req.GetIterations()))
	case *sharelogv1.SetScramCredentialRequest_Salted:
		iterations := int(req.GetIterations())
		if iterations == 0 {
			iterations = users.DefaultIterations
		}
		err = s.users.SetSalted(ctx, req.GetUser(), req.GetMechanism(), sec.Salted.GetSalt(), sec.Salted.GetSaltedPassword(), iterations)
	default:
		return nil, apierr.Invalid("one of password or salted is required")
	}
	s.guard.Changed(ctx, "SetScramCredential", authz.Cluster, authz.ClusterName, err,
		slog.String("user", req.GetUser()), slog.String("mechanism", req.GetMechanism()))
	if err != nil {
		return nil, err
	}
	u, _, err := s.users.Describe(ctx, req.GetUser())
	if err != nil {
		return nil, err
	}
	return &sharelogv1.SetScramCredentialResponse{User: userToProto(u)}, nil
}

func (s *UserService) DeleteScramCredential(ctx context.Context, req *sharelogv1.DeleteScramCredentialRequest) (*sharelogv1.DeleteScramCredentialResponse, error) {
	if err := s.guard.Require(ctx, authz.Alter, authz.Cluster, authz.ClusterName); err != nil {
		return nil, err
	}
	err := s.users.Delete(ctx, req.GetUser(), req.GetMechanism())
	s.guard.Changed(ctx, "DeleteScramCredential", authz.Cluster, authz.ClusterName, err,
		slog.String("user", req.GetUser()), slog.String("mechanism", req.GetMechanism()))
	if err != nil {
		return nil, err
	}
	return &sharelogv1.DeleteScramCredentialResponse{}, nil
}
