package users

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"github.com/sharelog/sharelog/internal/storage/scramcreds"
)

// The server side of a SCRAM exchange (RFC 5802), as Kafka's broker runs
// it:
//
//	client-first  gs2-header client-first-bare, the header "n,," or "y,,"
//	              (no channel binding) or with "a=<the user>"; the bare
//	              part n=<saslname>,r=<client nonce>[,extensions]
//	server-first  r=<client nonce><server nonce>,s=<salt>,i=<iterations>
//	client-final  c=<base64 of the header>,r=<nonce>[,...],p=<proof>
//	server-final  v=<server signature>
//
// The final message's nonce must end with the server-first nonce, Kafka's
// rule: librdkafka sends its client nonce in front of the whole server-first
// nonce. AuthMessage is built from the messages as sent, so the proof covers
// exactly what the client signed. Extensions are refused when mandatory
// (m=) or when they ask for a delegation token (tokenauth=true, which this
// server does not issue). A user without a credential runs the exchange on a
// random decoy, so the answer cannot tell unknown users from wrong
// passwords.

// ErrAuthentication is every refused login: unknown users and wrong
// passwords are not told apart.
var ErrAuthentication = errors.New("invalid credentials")

// Login is one SCRAM exchange: Step takes each client message and returns
// the answer. The login succeeded when Step returned no error and Done is
// true; User is then the principal.
type Login struct {
	u    *Users
	ctx  context.Context
	mech string
	h    func() hash.Hash

	step      int
	name      string
	gs2       string // the client-first header, which c= must repeat
	c1bare    string
	s1        string
	nonce     string
	cred      scramcreds.Credential
	done      bool
	principal string
}

// Start begins a SCRAM login with mech; ctx bounds the credential lookup.
func (u *Users) Start(ctx context.Context, mech string) (*Login, error) {
	h, err := hashOf(mech)
	if err != nil {
		return nil, err
	}
	return &Login{u: u, ctx: ctx, mech: mech, h: func() hash.Hash { return h() }}, nil
}

// Done reports whether the exchange succeeded.
func (l *Login) Done() bool { return l.done }

// User is the principal of a succeeded login: User:<name>.
func (l *Login) User() string { return l.principal }

// Step answers one client message. The error is what the client is told
// (wrapping ErrAuthentication for bad credentials); after an error the
// login is over.
func (l *Login) Step(msg []byte) ([]byte, error) {
	l.step++
	switch l.step {
	case 1:
		return l.first(string(msg))
	case 2:
		return l.final(string(msg))
	}
	return nil, errors.New("authentication failed: the SCRAM exchange is already complete")
}

func malformed(mech, why string) error {
	return fmt.Errorf("authentication failed: malformed %s message: %s", mech, why)
}

func (l *Login) refused() error {
	return fmt.Errorf("authentication failed during authentication due to %w with SASL mechanism %s", ErrAuthentication, l.mech)
}

// saslName decodes RFC 5802's saslname: "=2C" is ',', "=3D" is '=', and no
// other '=' may appear.
func saslName(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

func (l *Login) first(c1 string) ([]byte, error) {
	// gs2-header: cbind-flag "," [authzid] ","
	parts := strings.SplitN(c1, ",", 3)
	if len(parts) != 3 {
		return nil, malformed(l.mech, "no GS2 header")
	}
	switch parts[0] {
	case "n", "y":
	default:
		return nil, malformed(l.mech, "channel binding is not supported")
	}
	authz := ""
	if parts[1] != "" {
		a, ok := strings.CutPrefix(parts[1], "a=")
		if !ok {
			return nil, malformed(l.mech, "bad authorization identity")
		}
		if authz, ok = saslName(a); !ok {
			return nil, malformed(l.mech, "bad authorization identity encoding")
		}
	}
	l.gs2 = parts[0] + "," + parts[1] + ","
	l.c1bare = parts[2]
	attrs := strings.Split(l.c1bare, ",")
	if len(attrs) < 2 || strings.HasPrefix(attrs[0], "m=") {
		return nil, malformed(l.mech, "mandatory extensions are not supported")
	}
	rawName, ok1 := strings.CutPrefix(attrs[0], "n=")
	cnonce, ok2 := strings.CutPrefix(attrs[1], "r=")
	if !ok1 || !ok2 || cnonce == "" {
		return nil, malformed(l.mech, "expected n=<user>,r=<nonce>")
	}
	name, ok := saslName(rawName)
	if !ok || name == "" {
		return nil, malformed(l.mech, "bad user name encoding")
	}
	for _, ext := range attrs[2:] {
		if strings.EqualFold(ext, "tokenauth=true") {
			return nil, errors.New("authentication failed: delegation tokens are not served")
		}
	}
	if authz != "" && authz != name {
		return nil, errors.New("authentication failed: the authorization identity must be empty or the user name")
	}
	l.name = name
	c, found, err := l.u.store.Get(l.ctx, name, l.mech)
	if err != nil {
		return nil, fmt.Errorf("authentication failed: the credential store is unavailable: %w", storageErr(err))
	}
	if !found {
		c = decoy(l.mech, l.h().Size())
	}
	l.cred = c
	var sn [24]byte
	_, _ = rand.Read(sn[:])
	l.nonce = cnonce + base64.RawURLEncoding.EncodeToString(sn[:])
	l.s1 = "r=" + l.nonce + ",s=" + base64.StdEncoding.EncodeToString(c.Salt) + ",i=" + strconv.Itoa(c.Iterations)
	return []byte(l.s1), nil
}

func (l *Login) final(c2 string) ([]byte, error) {
	i := strings.LastIndex(c2, ",p=")
	if i < 0 || !strings.HasPrefix(c2, "c=") {
		return nil, malformed(l.mech, "expected c=...,r=...,p=...")
	}
	c2wop, proofB64 := c2[:i], c2[i+3:]
	attrs := strings.Split(c2wop, ",")
	if len(attrs) < 2 {
		return nil, malformed(l.mech, "expected c=...,r=...,p=...")
	}
	cbind, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(attrs[0], "c="))
	if err != nil || string(cbind) != l.gs2 {
		return nil, malformed(l.mech, "the channel binding does not repeat the GS2 header")
	}
	nonce, ok := strings.CutPrefix(attrs[1], "r=")
	if !ok || !strings.HasSuffix(nonce, l.nonce) {
		return nil, malformed(l.mech, "the nonce is not the server's")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != l.h().Size() {
		return nil, l.refused()
	}
	authMsg := []byte(l.c1bare + "," + l.s1 + "," + c2wop)
	clientKey := mac(l.h, l.cred.StoredKey, authMsg)
	for j := range clientKey {
		clientKey[j] ^= proof[j]
	}
	d := l.h()
	d.Write(clientKey)
	if subtle.ConstantTimeCompare(d.Sum(nil), l.cred.StoredKey) != 1 {
		return nil, l.refused()
	}
	l.done, l.principal = true, "User:"+l.name
	return []byte("v=" + base64.StdEncoding.EncodeToString(mac(l.h, l.cred.ServerKey, authMsg))), nil
}

func mac(h func() hash.Hash, key, data []byte) []byte {
	m := hmac.New(h, key)
	m.Write(data)
	return m.Sum(nil)
}

// decoy is a credential no password matches, with a random salt and the
// default iterations.
func decoy(mech string, size int) scramcreds.Credential {
	salt := make([]byte, SaltBytes)
	_, _ = rand.Read(salt)
	key := make([]byte, size)
	_, _ = rand.Read(key)
	return scramcreds.Credential{Mechanism: mech, Salt: salt, Iterations: DefaultIterations, StoredKey: key, ServerKey: bytes.Clone(key)}
}
