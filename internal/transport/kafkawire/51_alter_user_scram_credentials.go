package kafkawire

import (
	"context"
	"errors"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/users"
)

// AlterUserScramCredentials (51) deletes and upserts SCRAM credentials,
// answering once per user, in the order users first appear:
//
//   - without ALTER on the CLUSTER every user is
//     CLUSTER_AUTHORIZATION_FAILED and nothing changes;
//   - a user with the same mechanism twice in the request (deletions and
//     upsertions together) is DUPLICATE_RESOURCE;
//   - an unknown mechanism is UNSUPPORTED_SASL_MECHANISM; iterations
//     outside 4096..16384, an empty name or salt, or a salted password of
//     the wrong length UNACCEPTABLE_CREDENTIAL; deleting a credential that
//     does not exist RESOURCE_NOT_FOUND;
//   - a user any of whose changes is refused gets none of them applied
//     (checked before any is made).
//
// An upsertion carries the salted password the client computed, from
// which StoredKey and ServerKey are derived (users.SetSalted); the salted
// password itself is not stored.

func (l *Listener) handleAlterUserScramCredentials(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	var order []string
	changes := map[string][]scramChange{}
	refused := map[string]error{}
	add := func(user string, m int8, up *kmsg.AlterUserSCRAMCredentialsRequestUpsertion) {
		if _, ok := changes[user]; !ok {
			order = append(order, user)
		}
		mech := scramMechanism(m)
		for _, c := range changes[user] {
			if c.mech == mech && refused[user] == nil {
				refused[user] = errDuplicate
			}
		}
		changes[user] = append(changes[user], scramChange{mech, up})
	}
	for _, d := range req.Deletions {
		add(d.Name, d.Mechanism, nil)
	}
	for i := range req.Upsertions {
		add(req.Upsertions[i].Name, req.Upsertions[i].Mechanism, &req.Upsertions[i])
	}
	authErr := l.require(ctx, authz.Alter, authz.Cluster, authz.ClusterName)
	for _, user := range order {
		r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		r.User = user
		err := authErr
		if err == nil {
			err = refused[user]
		}
		if err == nil {
			err = l.checkAlter(ctx, user, changes[user])
		}
		if err == nil {
			for _, c := range changes[user] {
				action := "AlterUserScramCredentials upsert"
				if c.up == nil {
					action = "AlterUserScramCredentials delete"
					err = l.cfg.Users.Delete(ctx, user, c.mech)
				} else {
					err = l.cfg.Users.SetSalted(ctx, user, c.mech, c.up.Salt, c.up.SaltedPassword, int(c.up.Iterations))
				}
				l.cfg.Guard.Changed(ctx, action, authz.Cluster, authz.ClusterName, err,
					slog.String("user", user), slog.String("mechanism", c.mech))
				if err != nil {
					break
				}
			}
		}
		switch {
		case authErr != nil:
			r.ErrorCode, r.ErrorMessage = kerr.ClusterAuthorizationFailed.Code, errMsg(err)
		case errors.Is(err, errDuplicate):
			r.ErrorCode, r.ErrorMessage = kerr.DuplicateResource.Code, errMsg(err)
		default:
			r.ErrorCode, r.ErrorMessage = userErr(err)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// errDuplicate is a user altered twice for one mechanism in a request.
var errDuplicate = errors.New("a user's credential for a mechanism may be altered only once per request")

// scramChange is one deletion (up == nil) or upsertion of a user's
// credential for mech ("" = an unknown mechanism number).
type scramChange struct {
	mech string
	up   *kmsg.AlterUserSCRAMCredentialsRequestUpsertion
}

// checkAlter validates every change of one user before any is made: the
// mechanism, the upsertion's values, and that a deleted credential exists.
func (l *Listener) checkAlter(ctx context.Context, user string, cs []scramChange) error {
	for _, c := range cs {
		if c.mech == "" {
			return apierr.New(apierr.UnsupportedSaslMechanism, "unknown SCRAM mechanism: 1 is SCRAM-SHA-256, 2 is SCRAM-SHA-512")
		}
		if c.up != nil {
			if err := users.CheckSalted(user, c.mech, c.up.Salt, c.up.SaltedPassword, int(c.up.Iterations)); err != nil {
				return err
			}
			continue
		}
		if err := users.CheckDelete(user, c.mech); err != nil {
			return err
		}
		u, _, err := l.cfg.Users.Describe(ctx, user)
		if err != nil {
			return err
		}
		found := false
		for _, m := range u.Mechanisms {
			found = found || m.Mechanism == c.mech
		}
		if !found {
			return apierr.New(apierr.ResourceNotFound, "user %q has no %s credential to delete", user, c.mech)
		}
	}
	return nil
}
