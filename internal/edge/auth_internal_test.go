package edge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/sharelog/sharelog/apierr"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// principalsOf authenticates each token against a parsed file.
func principalsOf(t *testing.T, tokens []authToken, try ...string) []string {
	t.Helper()
	a := &Authenticator{path: "x"}
	a.table.Store(&tokens)
	var out []string
	for _, tok := range try {
		user, ok := a.identify("Bearer " + tok)
		if !ok {
			user = "-"
		}
		out = append(out, user)
	}
	return out
}

func TestParseTokens(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		try     []string // tokens to present
		want    []string // their principals, "-" = refused
		wantErr string
	}{
		{name: "named", file: "alice s3cret\nbob other\n", try: []string{"s3cret", "other", "alice"},
			want: []string{"User:alice", "User:bob", "-"}},
		{name: "hashed", file: "alice sha256:" + sha256Hex("s3cret") + "\n", try: []string{"s3cret", "sha256:" + sha256Hex("s3cret")},
			want: []string{"User:alice", "-"}},
		{name: "hashed, upper-case hex", file: "alice sha256:" + strings.ToUpper(sha256Hex("s3cret")), try: []string{"s3cret"},
			want: []string{"User:alice"}},
		{name: "bare lines keep their line number", file: "# tokens\n\nfirst\n  second  \n", try: []string{"first", "second"},
			want: []string{"User:token-3", "User:token-4"}},
		{name: "mixed, comments and blanks", file: "# a comment\nalice a1\n\n   # indented comment\nb2\n", try: []string{"a1", "b2"},
			want: []string{"User:alice", "User:token-5"}},
		{name: "a name with two tokens (rotation)", file: "alice old\nalice new\n", try: []string{"old", "new"},
			want: []string{"User:alice", "User:alice"}},
		{name: "tabs separate too", file: "alice\ts3cret\n", try: []string{"s3cret"}, want: []string{"User:alice"}},
		{name: "SPIFFE-like name", file: "spiffe://example.org/app s3cret\n", try: []string{"s3cret"}, want: []string{"User:spiffe://example.org/app"}},

		// A hash is not a password: the file may be public, so the text
		// "sha256:<hex>" must never itself be a token, whatever its case.
		{name: "hashed, upper-case prefix", file: "alice SHA256:" + sha256Hex("s3cret") + "\n",
			try: []string{"s3cret", "SHA256:" + sha256Hex("s3cret")}, want: []string{"User:alice", "-"}},

		{name: "bare hash line", file: "sha256:" + sha256Hex("s3cret") + "\n", wantErr: "line 1: a hashed token needs a name"},
		{name: "bare hash line, upper case", file: "Sha256:" + sha256Hex("s3cret") + "\n", wantErr: "line 1: a hashed token needs a name"},
		{name: "short hash, upper-case prefix", file: "alice SHA256:abcd\n", wantErr: "line 1: sha256: must be followed by the 64 hex digits"},
		// A name may be token-<n> (to keep a bare line's principal when
		// naming it); a new bare token on line n then takes the next free
		// number: two tokens are never one principal by accident.
		{name: "named like a bare line's principal", file: "admin-secret\ntoken-1 s3cret\n", try: []string{"admin-secret", "s3cret"},
			want: []string{"User:token-2", "User:token-1"}},
		{name: "named like a bare line's principal, named first", file: "token-2 s3cret\nadmin-secret\n", try: []string{"admin-secret", "s3cret"},
			want: []string{"User:token-3", "User:token-2"}},
		{name: "a bare line's principal kept by naming it", file: "# was a bare line\ntoken-5 s3cret\n", try: []string{"s3cret"}, want: []string{"User:token-5"}},
		{name: "empty", file: "", wantErr: "holds no token"},
		{name: "comments only", file: "# nothing\n\n", wantErr: "holds no token"},
		{name: "three words", file: "alice s3cret extra\n", wantErr: "line 1: want"},
		{name: "short hash", file: "ok t\nalice sha256:abcd\n", wantErr: "line 2: sha256: must be followed by the 64 hex digits"},
		{name: "not hex", file: "alice sha256:" + strings.Repeat("zz", 32) + "\n", wantErr: "line 1: sha256:"},
		{name: "same token twice", file: "alice s3cret\nbob s3cret\n", wantErr: "line 2: the same token as line 1"},
		{name: "same token, once hashed", file: "alice s3cret\n#\nbob sha256:" + sha256Hex("s3cret") + "\n", wantErr: "line 3: the same token as line 1"},
		{name: "duplicate bare line", file: "tok\ntok\n", wantErr: "line 2: the same token as line 1"},
		{name: "ANONYMOUS", file: "ANONYMOUS s3cret\n", wantErr: "line 1: the name ANONYMOUS"},
		{name: "instance principal", file: "sharelog-instance s3cret\n", wantErr: "line 1: the name sharelog-instance"},
		{name: "wildcard", file: "* s3cret\n", wantErr: "line 1: the name *"},
		{name: "User: prefix", file: "User:alice s3cret\n", wantErr: `line 1: write the name without "User:"`},
		{name: "comma", file: "a,b s3cret\n", wantErr: "line 1: a name must not contain a comma"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens, err := parseTokens(strings.NewReader(tc.file))
			if err == nil {
				rec, lerr := loadBareRecord("")
				require.NoError(t, lerr)
				_, err = rec.assign(tokens, slog.New(slog.DiscardHandler))
			}
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.NotContains(t, err.Error(), "s3cret", "errors never show a token")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, principalsOf(t, tokens, tc.try...))
		})
	}
}

// The cluster's instance secret, once set, is a credential of its own
// principal; a token of the file stays its user's.
func TestIdentifyInstanceSecret(t *testing.T) {
	tokens, err := parseTokens(strings.NewReader("alice s3cret\n"))
	require.NoError(t, err)
	a := &Authenticator{path: "x"}
	a.table.Store(&tokens)
	_, ok := a.identify("Bearer cluster-secret")
	require.False(t, ok, "no secret set yet")
	a.SetInstanceSecret("cluster-secret")
	user, ok := a.identify("Bearer cluster-secret")
	require.True(t, ok)
	assert.Equal(t, InstancePrincipal, user)
	user, ok = a.identify("Bearer s3cret")
	require.True(t, ok)
	assert.Equal(t, "User:alice", user)
	_, ok = a.identify("Bearer cluster-secre")
	assert.False(t, ok)
}

// The scheme word is case-insensitive; anything else is no credential.
func TestIdentifyHeader(t *testing.T) {
	tokens, err := parseTokens(strings.NewReader("alice s3cret\n"))
	require.NoError(t, err)
	a := &Authenticator{path: "x"}
	a.table.Store(&tokens)
	for header, want := range map[string]bool{
		"Bearer s3cret": true, "bearer s3cret": true, "BEARER s3cret": true, "Bearer   s3cret ": true,
		"Basic s3cret": false, "Bearers3cret": false, "s3cret": false, "Bearer ": false, "": false,
		"Bearer s3cret2": false, "Bearer S3CRET": false,
	} {
		_, ok := a.identify(header)
		assert.Equal(t, want, ok, "%q", header)
	}
	// Two authorization values are refused even if one is good.
	md := metadata.Pairs("authorization", "Bearer s3cret", "authorization", "Bearer other")
	_, err = a.authenticate(metadata.NewIncomingContext(context.Background(), md), "")
	require.ErrorContains(t, err, "more than one")
	// An unknown token fails even with a certificate; no token, the
	// certificate names the principal; a token wins over it.
	unknown := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer nope"))
	_, err = a.authenticate(unknown, "User:cert")
	require.ErrorContains(t, err, "unknown token")
	assert.NotContains(t, err.Error(), "nope")
	user, err := a.authenticate(context.Background(), "User:cert")
	require.NoError(t, err)
	assert.Equal(t, "User:cert", user)
	good := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer s3cret"))
	user, err = a.authenticate(good, "User:cert")
	require.NoError(t, err)
	assert.Equal(t, "User:alice", user)
	_, err = a.authenticate(context.Background(), "")
	require.ErrorContains(t, err, "a valid bearer token is required")
}

// A listener that carries a token in its own protocol (not an
// authorization header) and one whose connection presented none get the
// gRPC answers: the same principals, and Unauthenticated where a gRPC
// call is refused.
func TestTokenAndWithoutToken(t *testing.T) {
	tokens, err := parseTokens(strings.NewReader("alice s3cret\n"))
	require.NoError(t, err)
	a := &Authenticator{path: "x"}
	a.table.Store(&tokens)
	user, err := a.Token("s3cret")
	require.NoError(t, err)
	assert.Equal(t, "User:alice", user)
	for _, bad := range []string{"nope", "", "Bearer s3cret"} {
		_, err = a.Token(bad)
		var e *apierr.Error
		require.ErrorAs(t, err, &e, "%q", bad)
		assert.Equal(t, apierr.Unauthenticated, e.Reason)
		assert.NotContains(t, err.Error(), "nope")
	}
	a.SetInstanceSecret("cluster-secret")
	user, err = a.Token("cluster-secret")
	require.NoError(t, err)
	assert.Equal(t, InstancePrincipal, user)
	assert.True(t, a.IsInstanceSecret("cluster-secret"))
	assert.False(t, a.IsInstanceSecret("cluster-secre"))

	_, err = a.WithoutToken("")
	require.ErrorContains(t, err, "a valid bearer token is required", "tokens are required")
	user, err = a.WithoutToken("User:cert")
	require.NoError(t, err)
	assert.Equal(t, "User:cert", user)

	none := &Authenticator{}
	_, err = none.Token("s3cret")
	require.Error(t, err, "without a tokens file no token is known")
	user, err = none.WithoutToken("")
	require.NoError(t, err)
	assert.Empty(t, user, "anonymous")
	certs := &Authenticator{clientCerts: true}
	_, err = certs.WithoutToken("")
	require.ErrorContains(t, err, "names no principal")
}

// Reloading: a changed file replaces the table; a bad, empty or missing
// file keeps it (logged once, without the token); auth stays on.
func TestTokensReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o600)) }
	write("alice old-secret\n")
	var logs bytes.Buffer
	a, err := NewAuthenticator(path, "", false, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	known := func(tok string) string {
		u, ok := a.identify("Bearer " + tok)
		if !ok {
			return "-"
		}
		return u
	}
	require.Equal(t, "User:alice", known("old-secret"))

	require.NoError(t, a.reload(false), "unchanged: nothing to do")
	assert.Empty(t, logs.String())

	write("alice new-secret\nbob sha256:" + sha256Hex("bob-secret") + "\n")
	require.NoError(t, a.reload(false))
	assert.Equal(t, "-", known("old-secret"), "a removed token is refused")
	assert.Equal(t, "User:alice", known("new-secret"))
	assert.Equal(t, "User:bob", known("bob-secret"))
	assert.Contains(t, logs.String(), "auth tokens reloaded")

	for _, bad := range []string{"alice new-secret extra\n", "", "# all gone\n"} {
		write(bad)
		require.Error(t, a.reload(false))
		assert.Equal(t, "User:alice", known("new-secret"), "a bad file keeps the tokens in force")
		assert.True(t, a.Enabled())
	}
	logged := strings.Count(logs.String(), "not reloaded")
	require.NoError(t, a.reload(false), "still bad but unchanged: not parsed again")
	assert.Equal(t, logged, strings.Count(logs.String(), "not reloaded"), "the same problem is logged once")
	require.Error(t, a.reload(true), "SIGHUP")
	assert.Equal(t, logged+1, strings.Count(logs.String(), "not reloaded"), "a forced reload always reports")

	require.NoError(t, os.Remove(path))
	require.Error(t, a.reload(false))
	assert.Equal(t, "User:alice", known("new-secret"), "a missing file keeps the tokens in force")
	for _, secret := range []string{"old-secret", "new-secret", "bob-secret", sha256Hex("bob-secret")} {
		assert.NotContains(t, logs.String(), secret, "tokens are never logged")
	}
}

// The certificate's principal: first URI SAN, else first DNS SAN, else the
// subject CN; only from the verified chain.
func TestCertPrincipal(t *testing.T) {
	spiffe, _ := url.Parse("spiffe://example.org/ns/prod/sa/app")
	other, _ := url.Parse("https://example.org/x")
	verified := func(c *x509.Certificate) *tls.ConnectionState {
		return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}, PeerCertificates: []*x509.Certificate{c}}
	}
	for _, tc := range []struct {
		name string
		cs   *tls.ConnectionState
		want string
	}{
		{"URI SAN first", verified(&x509.Certificate{URIs: []*url.URL{spiffe, other}, DNSNames: []string{"app.example.org"},
			Subject: pkix.Name{CommonName: "app"}}), "User:spiffe://example.org/ns/prod/sa/app"},
		{"then DNS SAN", verified(&x509.Certificate{DNSNames: []string{"app.example.org", "b"}, Subject: pkix.Name{CommonName: "app"}}),
			"User:app.example.org"},
		{"then CN", verified(&x509.Certificate{Subject: pkix.Name{CommonName: "app", Organization: []string{"o"}}}), "User:app"},
		{"nothing to name", verified(&x509.Certificate{}), ""},
		// Names that would read as the anonymous principal or the ACL
		// wildcard name nobody (and the call is refused), as in a tokens file.
		{"CN ANONYMOUS", verified(&x509.Certificate{Subject: pkix.Name{CommonName: "ANONYMOUS"}}), ""},
		{"DNS SAN *", verified(&x509.Certificate{DNSNames: []string{"*"}, Subject: pkix.Name{CommonName: "app"}}), ""},
		{"CN with a control character", verified(&x509.Certificate{Subject: pkix.Name{CommonName: "app\nUser:admin"}}), ""},
		{"unverified", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "app"}}}}, ""},
		{"no TLS", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, CertPrincipal(tc.cs))
		})
	}
}

func TestTrustedProxies(t *testing.T) {
	tp, err := ParseTrustedProxies(" 10.0.0.0/8, 192.168.1.7 ,::1")
	require.NoError(t, err)
	for _, tc := range []struct {
		peer      string
		forwarded []string
		want      string
	}{
		{"10.1.2.3", []string{"203.0.113.9"}, "203.0.113.9"},
		{"10.1.2.3", []string{"198.51.100.1, 203.0.113.9, 10.9.9.9"}, "203.0.113.9"}, // nearest untrusted hop
		{"10.1.2.3", []string{"198.51.100.1", "203.0.113.9"}, "203.0.113.9"},         // several header lines
		{"10.1.2.3", []string{"10.2.2.2, 192.168.1.7"}, "10.2.2.2"},                  // all trusted: the farthest
		{"10.1.2.3", []string{"garbage, 203.0.113.9"}, "203.0.113.9"},
		{"10.1.2.3", []string{"203.0.113.9, garbage"}, "10.1.2.3"}, // unparsable nearest hop: the peer
		{"10.1.2.3", nil, "10.1.2.3"},
		{"::1", []string{"[2001:db8::1]:443"}, "2001:db8::1"},
	} {
		assert.Equal(t, tc.want, tp.clientOf(tc.peer, tc.forwarded), "%s %v", tc.peer, tc.forwarded)
	}
	assert.True(t, tp.contains("192.168.1.7"))
	assert.True(t, tp.contains("::ffff:10.0.0.1"))
	assert.False(t, tp.contains("192.168.1.8"))
	assert.False(t, tp.contains("bufconn"))
	assert.False(t, TrustedProxies(nil).contains("10.0.0.1"))
	_, err = ParseTrustedProxies("10.0.0.0/33")
	require.ErrorContains(t, err, "10.0.0.0/33")
	_, err = ParseTrustedProxies("example.org")
	require.Error(t, err)
}

// The example tokens file of docs/principals.md parses to what the page
// says.
func TestPrincipalsDocExample(t *testing.T) {
	raw, err := os.ReadFile("../../docs/principals.md")
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(raw), "```text\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	tokens, err := parseTokens(strings.NewReader(block))
	require.NoError(t, err)
	assert.Equal(t, []string{"User:alice", "User:bob", "User:token-6"},
		principalsOf(t, tokens, "3f9c2d7e8a1b4c5d6e7f8091a2b3c4d5", "bob-example-token", "5c1e0d4f3b2a19887766554433221100"))
}

// A tokens file replaced by a FIFO, a device or something huge is refused
// at once, at start and on reload, and the tokens in force stay; a symlink
// to a regular file (how Kubernetes mounts secrets) is followed.
func TestTokensFileNotRegularOrHuge(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	require.NoError(t, os.WriteFile(real, []byte("alice s3cret\n"), 0o600))
	path := filepath.Join(dir, "tokens")
	require.NoError(t, os.Symlink(real, path))
	a, err := NewAuthenticator(path, "", false, nil)
	require.NoError(t, err, "a symlink to a regular file is read")

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	huge := filepath.Join(dir, "huge")
	var b strings.Builder
	for i := 0; b.Len() <= maxTokensFileBytes; i++ {
		fmt.Fprintf(&b, "user%d token-%d-%s\n", i, i, strings.Repeat("x", 40))
	}
	require.NoError(t, os.WriteFile(huge, []byte(b.String()), 0o600))

	for name, target := range map[string]string{"fifo": fifo, "device": os.DevNull, "huge": huge} {
		require.NoError(t, os.Remove(path))
		require.NoError(t, os.Symlink(target, path))
		done := make(chan error, 2)
		go func() {
			_, err := NewAuthenticator(path, "", false, nil)
			done <- err
			done <- a.reload(true)
		}()
		for _, step := range []string{"start", "reload"} {
			select {
			case err := <-done:
				require.Error(t, err, "%s at %s", name, step)
			case <-time.After(5 * time.Second):
				t.Fatalf("%s at %s: reading the tokens file blocked", name, step)
			}
		}
		user, ok := a.identify("Bearer s3cret")
		assert.True(t, ok && user == "User:alice", "%s: the tokens in force stay", name)
	}
}

// With client certificates as the only credential, a call whose verified
// certificate names nobody (no URI SAN, DNS SAN or CN) is refused: it is
// not User:ANONYMOUS, which would share one principal (its members, its
// session share, its bindings) among every such certificate.
func TestNamelessCertificateRefused(t *testing.T) {
	a := &Authenticator{clientCerts: true}
	user, err := a.authenticate(context.Background(), "User:carol")
	require.NoError(t, err)
	assert.Equal(t, "User:carol", user)
	_, err = a.authenticate(context.Background(), "")
	require.ErrorContains(t, err, "names no principal")

	req := &http.Request{Header: http.Header{}, TLS: &tls.ConnectionState{}}
	assert.False(t, a.HTTPAllowed(req), "/metrics: a certificate that names nobody is no credential")
	none := &Authenticator{}
	user, err = none.authenticate(context.Background(), "")
	require.NoError(t, err, "without authentication every call is anonymous")
	assert.Empty(t, user)
	assert.True(t, none.HTTPAllowed(req))
}

// A bare token keeps the principal it was first given: removing the
// admin's line 1 must not make the user's token on line 2 User:token-1
// (the admin's super-user rights and bindings), neither on reload nor
// after a restart, and a name once given is never given to another token.
func TestReloadNeverRenumbersABareToken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	record := filepath.Join(dir, "data", PrincipalsFile)
	write := func(s string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o600)) }
	write("admin-secret\nuser-secret\nalice alice-secret\n")
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	a, err := NewAuthenticator(path, record, false, log)
	require.NoError(t, err)
	known := func(tok string) string {
		u, ok := a.identify("Bearer " + tok)
		if !ok {
			return "-"
		}
		return u
	}
	require.Equal(t, "User:token-1", known("admin-secret"), "a new file: bare tokens take their lines")
	require.Equal(t, "User:token-2", known("user-secret"))

	write("user-secret\nalice alice-secret\nnew-secret\n") // the admin's line removed
	require.NoError(t, a.reload(false))
	assert.Equal(t, "-", known("admin-secret"), "the removal takes effect")
	assert.Equal(t, "User:token-2", known("user-secret"), "not User:token-1: it keeps its principal")
	assert.Equal(t, "User:alice", known("alice-secret"))
	assert.Equal(t, "User:token-3", known("new-secret"), "a new bare token takes its line when no token had it")

	write("newest-secret\nuser-secret\nalice alice-secret\nnew-secret\n")
	require.NoError(t, a.reload(false))
	assert.Equal(t, "User:token-4", known("newest-secret"), "token-1 was the admin's, token-2 and -3 are taken")
	assert.Contains(t, logs.String(), "principal=User:token-4")
	assert.Contains(t, logs.String(), "not=User:token-1")

	// A restart reads the record: nothing moves, and token-1 stays given.
	a, err = NewAuthenticator(path, record, false, log)
	require.NoError(t, err)
	for tok, want := range map[string]string{"newest-secret": "User:token-4", "user-secret": "User:token-2", "new-secret": "User:token-3"} {
		assert.Equal(t, want, known(tok), tok)
	}
	write("admin-secret\n#\n#\n#\nuser-secret\n")
	require.NoError(t, a.reload(false))
	assert.Equal(t, "User:token-1", known("admin-secret"), "a token put back is itself again")
	assert.Equal(t, "User:token-2", known("user-secret"))

	write("bob user-secret\nalice alice-secret\n")
	require.NoError(t, a.reload(false))
	assert.Equal(t, "User:bob", known("user-secret"), "naming a token is deliberate: allowed")

	// A named line may keep a principal only for its own token: naming
	// another token like a bare token of the file is refused whole.
	write("token-2 other-secret\nuser-secret\n")
	require.ErrorContains(t, a.reload(false), "line 1: the name token-2 is the principal of the bare token on line 2")
	assert.Equal(t, "User:bob", known("user-secret"), "the previous tokens stay in force")

	raw, err := os.ReadFile(record)
	require.NoError(t, err)
	for _, secret := range []string{"admin-secret", "user-secret", "new-secret", "newest-secret"} {
		assert.NotContains(t, string(raw), secret, "the record holds no token")
		assert.NotContains(t, logs.String(), secret, "never logged")
		assert.Contains(t, string(raw), sha256Hex(secret), "only its SHA-256")
	}
}

// The record cannot be lost silently: a damaged file stops the start
// (naming it), and one that cannot be written refuses the reload that
// would give a new principal, keeping the tokens in force.
func TestBareRecordDamagedOrUnwritable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(path, []byte("first\n"), 0o600))
	record := filepath.Join(dir, "data", PrincipalsFile)
	a, err := NewAuthenticator(path, record, false, nil)
	require.NoError(t, err)

	// The temporary file of the atomic write cannot be created (a
	// directory in its place fails even for root).
	require.NoError(t, os.Mkdir(record+".tmp", 0o755))
	require.NoError(t, os.WriteFile(path, []byte("first\nsecond\n"), 0o600))
	require.ErrorContains(t, a.reload(false), record)
	_, err = a.Token("second")
	assert.Error(t, err, "never a principal that is not recorded")
	user, err := a.Token("first")
	require.NoError(t, err)
	assert.Equal(t, "User:token-1", user, "the previous tokens stay in force")
	require.NoError(t, os.Remove(record+".tmp"))
	require.NoError(t, a.reload(false))
	user, err = a.Token("second")
	require.NoError(t, err)
	assert.Equal(t, "User:token-2", user)

	require.NoError(t, os.WriteFile(record, []byte(`{"version":1,"tokens":{`), 0o644))
	_, err = NewAuthenticator(path, record, false, nil)
	require.ErrorContains(t, err, record)
	require.ErrorContains(t, err, "damaged")
}
