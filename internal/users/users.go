// Package users is the domain of the Kafka listener's SCRAM users
// (docs/security.md "SCRAM users"): setting, deleting and describing a
// user's SCRAM-SHA-256 and SCRAM-SHA-512 credentials (the UserService and
// Kafka's AlterUserScramCredentials / DescribeUserScramCredentials both
// call it), and the server side of a SCRAM login (RFC 5802, RFC 7677;
// login.go). Keys are derived from passwords with github.com/xdg-go/scram
// (PBKDF2; no SASLprep, as Kafka); the exchange is login.go's, because xdg-go's server
// insists on the exact nonce in the client's final message and librdkafka
// (kcat, confluent-kafka) repeats its own nonce there, which Kafka accepts.
//
// A credential is kept as salt, iterations, StoredKey and ServerKey only
// (internal/storage/scramcreds); the password is used to derive them and
// dropped. Iterations are between MinIterations and MaxIterations, as
// Kafka allows. The principal of a SCRAM login is User:<name>.
//
// Authorization is the transports' (ALTER or DESCRIBE on the cluster, as
// Kafka requires); this package checks only what is asked.
package users

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"hash"
	"slices"
	"unicode/utf8"

	"github.com/xdg-go/scram"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/scramcreds"
)

// The mechanisms, by their SASL names.
const (
	SHA256 = scramcreds.SHA256
	SHA512 = scramcreds.SHA512
)

// Mechanisms lists every SCRAM mechanism served, in Kafka's order (its
// ScramMechanism enum: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512).
var Mechanisms = []string{SHA256, SHA512}

// Iteration bounds (Kafka's: 4096 to 16384) and the default of the
// UserService and sharelogctl.
const (
	MinIterations     = 4096
	MaxIterations     = 16384
	DefaultIterations = 8192
)

// SaltBytes is the length of the random salt of a credential set from a
// password.
const SaltBytes = 32

// MaxNameBytes bounds a user name.
const MaxNameBytes = 256

// Users manages the credentials in one store.
type Users struct {
	store scramcreds.Store
}

// New returns the users of store.
func New(store scramcreds.Store) *Users { return &Users{store: store} }

func hashOf(mech string) (scram.HashGeneratorFcn, error) {
	switch mech {
	case SHA256:
		return scram.SHA256, nil
	case SHA512:
		return scram.SHA512, nil
	}
	return nil, apierr.New(apierr.UnsupportedSaslMechanism, "mechanism %q: the SCRAM mechanisms are %s and %s", mech, SHA256, SHA512)
}

// checkName refuses an empty, non-UTF-8 or overlong user name.
func checkName(user string) error {
	switch {
	case user == "":
		return apierr.New(apierr.UnacceptableCredential, "the user name is empty")
	case !utf8.ValidString(user):
		return apierr.New(apierr.UnacceptableCredential, "the user name is not UTF-8")
	case len(user) > MaxNameBytes:
		return apierr.New(apierr.UnacceptableCredential, "the user name is longer than %d bytes", MaxNameBytes)
	}
	return nil
}

func checkIterations(n int) error {
	if n < MinIterations || n > MaxIterations {
		return apierr.New(apierr.UnacceptableCredential, "iterations %d: must be between %d and %d", n, MinIterations, MaxIterations)
	}
	return nil
}

// storageErr is a store failure as a reason: the change may or may not
// have been made.
func storageErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return apierr.New(apierr.KafkaStorageError, "the SCRAM credential store failed: %v", err)
}

// SetPassword sets user's credential for mech from a password: a new random
// salt, PBKDF2 with iterations (0 = DefaultIterations), and the keys
// derived from it. The password is taken as its UTF-8 bytes, without RFC
// 5802's SASLprep, as Kafka takes it: Kafka clients send the PBKDF2 of the
// bytes as typed, so a prepared password would refuse them.
func (u *Users) SetPassword(ctx context.Context, user, mech, password string, iterations int) error {
	if iterations == 0 {
		iterations = DefaultIterations
	}
	h, err := hashOf(mech)
	if err != nil {
		return err
	}
	if err := errors.Join(checkName(user), checkIterations(iterations)); err != nil {
		return err
	}
	if password == "" {
		return apierr.New(apierr.UnacceptableCredential, "the password is empty")
	}
	// As Kafka: the password's UTF-8 bytes, without SASLprep (Kafka's
	// clients and broker do not prepare it, so neither may the server).
	client, err := h.NewClientUnprepped(user, password, "")
	if err != nil {
		return apierr.New(apierr.UnacceptableCredential, "the password cannot be used: %v", err)
	}
	salt := make([]byte, SaltBytes)
	_, _ = rand.Read(salt)
	sc, err := client.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	if err != nil {
		return apierr.New(apierr.UnacceptableCredential, "derive the keys: %v", err)
	}
	return u.put(ctx, scramcreds.Credential{User: user, Mechanism: mech, Salt: salt, Iterations: iterations,
		StoredKey: sc.StoredKey, ServerKey: sc.ServerKey})
}

// SetSalted sets user's credential for mech from the salted password a
// Kafka client computed (AlterUserScramCredentials: SaltedPassword =
// PBKDF2(password, salt, iterations)), deriving StoredKey and ServerKey
// from it as RFC 5802 does.
func (u *Users) SetSalted(ctx context.Context, user, mech string, salt, salted []byte, iterations int) error {
	h, err := hashOf(mech)
	if err != nil {
		return err
	}
	if err := errors.Join(checkName(user), checkIterations(iterations)); err != nil {
		return err
	}
	if len(salt) == 0 {
		return apierr.New(apierr.UnacceptableCredential, "the salt is empty")
	}
	if len(salted) != h().Size() {
		return apierr.New(apierr.UnacceptableCredential, "the salted password has %d bytes, %s needs %d", len(salted), mech, h().Size())
	}
	stored, server := keys(h, salted)
	return u.put(ctx, scramcreds.Credential{User: user, Mechanism: mech, Salt: slices.Clone(salt), Iterations: iterations,
		StoredKey: stored, ServerKey: server})
}

// keys are RFC 5802's StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
// ServerKey = HMAC(SaltedPassword, "Server Key"). xdg-go/scram derives
// them only from a password, so the two lines over its hash are here.
func keys(h scram.HashGeneratorFcn, salted []byte) (stored, server []byte) {
	mac := func(data string) []byte {
		m := hmac.New(func() hash.Hash { return h() }, salted)
		m.Write([]byte(data))
		return m.Sum(nil)
	}
	d := h()
	d.Write(mac("Client Key"))
	return d.Sum(nil), mac("Server Key")
}

func (u *Users) put(ctx context.Context, c scramcreds.Credential) error {
	if err := u.store.Put(ctx, c); err != nil {
		return storageErr(err)
	}
	return nil
}

// Delete removes user's credential for mech: RESOURCE_NOT_FOUND when there
// is none.
func (u *Users) Delete(ctx context.Context, user, mech string) error {
	if _, err := hashOf(mech); err != nil {
		return err
	}
	if err := checkName(user); err != nil {
		return err
	}
	found, err := u.store.Delete(ctx, user, mech)
	if err != nil {
		return storageErr(err)
	}
	if !found {
		return apierr.New(apierr.ResourceNotFound, "user %q has no %s credential", user, mech)
	}
	return nil
}

// CheckDelete is Delete's validation without the deletion (a transport
// answering per item before it changes anything).
func CheckDelete(user, mech string) error {
	if _, err := hashOf(mech); err != nil {
		return err
	}
	return checkName(user)
}

// CheckSalted is SetSalted's validation without the write.
func CheckSalted(user, mech string, salt, salted []byte, iterations int) error {
	h, err := hashOf(mech)
	if err != nil {
		return err
	}
	if err := errors.Join(checkName(user), checkIterations(iterations)); err != nil {
		return err
	}
	if len(salt) == 0 || len(salted) != h().Size() {
		return apierr.New(apierr.UnacceptableCredential, "the salt is empty or the salted password is not %d bytes", h().Size())
	}
	return nil
}

// MechanismInfo is what may be told of one credential.
type MechanismInfo struct {
	Mechanism  string
	Iterations int
}

// User is a user with at least one credential.
type User struct {
	Name       string
	Mechanisms []MechanismInfo // in Mechanisms' order
}

// List returns every user with a credential, sorted by name, with their
// mechanisms and iterations — never a salt or a key.
func (u *Users) List(ctx context.Context) ([]User, error) {
	cs, err := u.store.List(ctx)
	if err != nil {
		return nil, storageErr(err)
	}
	var out []User
	for _, c := range cs {
		if len(out) == 0 || out[len(out)-1].Name != c.User {
			out = append(out, User{Name: c.User})
		}
		last := &out[len(out)-1]
		last.Mechanisms = append(last.Mechanisms, MechanismInfo{Mechanism: c.Mechanism, Iterations: c.Iterations})
	}
	for i := range out {
		slices.SortFunc(out[i].Mechanisms, func(a, b MechanismInfo) int {
			return slices.Index(Mechanisms, a.Mechanism) - slices.Index(Mechanisms, b.Mechanism)
		})
	}
	return out, nil
}

// Describe returns the named users; found is false for a name without any
// credential.
func (u *Users) Describe(ctx context.Context, name string) (user User, found bool, err error) {
	user.Name = name
	for _, m := range Mechanisms {
		c, ok, err := u.store.Get(ctx, name, m)
		if err != nil {
			return user, false, storageErr(err)
		}
		if ok {
			user.Mechanisms = append(user.Mechanisms, MechanismInfo{Mechanism: m, Iterations: c.Iterations})
		}
	}
	return user, len(user.Mechanisms) > 0, nil
}
