package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/users"
)

// DescribeUserScramCredentials (50) and AlterUserScramCredentials (51,
// 51_alter_user_scram_credentials.go) manage the SCRAM users
// (internal/users) as Kafka does, needing DESCRIBE and ALTER on the
// CLUSTER:
//
//   - Describe names users (none = every user) and answers each with its
//     mechanisms and iterations, never a salt or key; a named user without
//     credentials is RESOURCE_NOT_FOUND, a name given twice
//     DUPLICATE_RESOURCE; without DESCRIBE on the cluster the whole answer
//     is CLUSTER_AUTHORIZATION_FAILED.
//   - Alter deletes and upserts (salt, salted password, iterations, as a
//     Kafka client computes them); see its file.
//
// Kafka's ScramMechanism enum: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512.

func init() {
	userHandlers[50] = handler{0, 0, (*Listener).handleDescribeUserScramCredentials}
	userHandlers[51] = handler{0, 0, (*Listener).handleAlterUserScramCredentials}
}

// userHandlers are added when the listener has SCRAM users.
var userHandlers = map[int16]handler{}

// scramMechanism is Kafka's ScramMechanism number of a mechanism name, and
// back.
func scramMechanism(m int8) string {
	if m >= 1 && int(m) <= len(users.Mechanisms) {
		return users.Mechanisms[m-1]
	}
	return ""
}

func scramMechanismNumber(name string) int8 {
	for i, m := range users.Mechanisms {
		if m == name {
			return int8(i + 1)
		}
	}
	return 0
}

// userErr is a per-user result of err: its reason's Kafka code.
func userErr(err error) (int16, *string) {
	if err == nil {
		return 0, nil
	}
	r := apierr.ReasonOf(err)
	if r == apierr.None {
		r = apierr.Internal
	}
	return r.KafkaCode(), errMsg(err)
}

func (l *Listener) handleDescribeUserScramCredentials(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if err := l.require(ctx, authz.Describe, authz.Cluster, authz.ClusterName); err != nil {
		resp.ErrorCode, resp.ErrorMessage = kerr.ClusterAuthorizationFailed.Code, errMsg(err)
		return resp, nil
	}
	result := func(u users.User) kmsg.DescribeUserSCRAMCredentialsResponseResult {
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = u.Name
		for _, m := range u.Mechanisms {
			ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
			ci.Mechanism, ci.Iterations = scramMechanismNumber(m.Mechanism), int32(m.Iterations)
			r.CredentialInfos = append(r.CredentialInfos, ci)
		}
		return r
	}
	if len(req.Users) == 0 {
		all, err := l.cfg.Users.List(ctx)
		if err != nil {
			resp.ErrorCode, resp.ErrorMessage = userErr(err)
			return resp, nil
		}
		for _, u := range all {
			resp.Results = append(resp.Results, result(u))
		}
		return resp, nil
	}
	seen := map[string]int{}
	for _, u := range req.Users {
		seen[u.Name]++
	}
	done := map[string]bool{}
	for _, ru := range req.Users {
		if done[ru.Name] {
			continue
		}
		done[ru.Name] = true
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = ru.Name
		if seen[ru.Name] > 1 {
			msg := "the user is named more than once"
			r.ErrorCode, r.ErrorMessage = kerr.DuplicateResource.Code, &msg
			resp.Results = append(resp.Results, r)
			continue
		}
		u, found, err := l.cfg.Users.Describe(ctx, ru.Name)
		switch {
		case err != nil:
			r.ErrorCode, r.ErrorMessage = userErr(err)
		case !found:
			r.ErrorCode, r.ErrorMessage = userErr(apierr.New(apierr.ResourceNotFound, "user %q has no SCRAM credential", ru.Name))
		default:
			r = result(u)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}
