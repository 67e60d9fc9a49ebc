package edge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/principal"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// ReloadInterval is how often Watch checks the tokens file for changes.
// Reading and hashing a file of a few lines is cheap; a change takes effect
// within this interval, or at once on Reload (cmd/server calls it on SIGHUP).
const ReloadInterval = time.Second

// maxTokensFileBytes bounds the tokens file: ample for tens of thousands of
// tokens, and a file replaced by something huge or endless is refused
// rather than read into memory every second.
const maxTokensFileBytes = 4 << 20

// readTokensFile reads the tokens file (through symlinks, as Kubernetes
// mounts secrets). It refuses what is not a regular file — a FIFO or a
// device would block or never end — and a file above maxTokensFileBytes.
func readTokensFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Checked again on what was opened: the path may have been replaced.
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxTokensFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxTokensFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxTokensFileBytes)
	}
	return raw, nil
}

// Authenticator names the principal of a call (docs/principals.md), the
// same way on every listener:
//   - a bearer token from --auth-tokens-file, whose line names it
//     ("User:<name>"; a bare token line is "User:token-<n>", the number it
//     was first given, recorded in the data dir: see bare.go);
//   - else, with --tls-client-ca, the verified client certificate (first
//     URI SAN, else first DNS SAN, else subject CN);
//   - else no principal: refused when tokens or client certificates are
//     configured (a verified certificate that names nobody is refused),
//     anonymous otherwise.
//
// The token table is replaced whole when the file changes; a file that
// does not parse keeps the previous table. Tokens are only held as
// SHA-256 sums and never logged.
//
// A gRPC listener uses it through the Gate; a plain HTTP handler through
// HTTPPrincipal; any other listener (Kafka, say) with Token for a token its
// protocol carried and WithoutToken for a connection that presented none,
// passing the connection's CertPrincipal.
type Authenticator struct {
	path        string // --auth-tokens-file; "" = no tokens
	clientCerts bool   // --tls-client-ca: verified client certificates name principals
	log         *slog.Logger
	table       atomic.Pointer[[]authToken]
	// instance is the SHA-256 of the cluster's instance secret (cluster
	// mode with tokens only): the credential instances present on the
	// calls they make on their own behalf, principal InstancePrincipal.
	instance atomic.Pointer[[sha256.Size]byte]

	mu      sync.Mutex // serialises reloads; guards the fields below
	lastSum [sha256.Size]byte
	lastErr string
	// bare is the record of the principals given to bare tokens (bare.go):
	// a reload or a restart never gives a token another one.
	bare *bareRecord

	callsMu sync.Mutex // guards calls; taken after mu, never before
	// calls are the running calls admitted with each token (revoke.go).
	calls map[[sha256.Size]byte]map[*callWatch]struct{}
}

// authToken is one accepted token: its SHA-256 (compared in constant time)
// and the principal it stands for, which is safe to log (the token never is).
type authToken struct {
	sum  [sha256.Size]byte
	user string // "User:<name>"
	line int    // its line in the file
	bare bool   // a bare token line: user is User:token-<n> (bare.go)
}

// NewAuthenticator reads the tokens file at path (--auth-tokens-file; "" =
// no tokens); clientCerts (--tls-client-ca) makes verified client
// certificates name principals. principals is the file that records the
// principals given to bare tokens (<data-dir>/auth-principals.json, see
// bare.go; "" = remembered in memory only, until the process ends).
// Reloads and refused tokens are logged to log (nil = nowhere).
func NewAuthenticator(path, principals string, clientCerts bool, log *slog.Logger) (*Authenticator, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{path: path, clientCerts: clientCerts, log: log}
	if path == "" {
		return a, nil
	}
	raw, err := readTokensFile(path)
	if err != nil {
		return nil, fmt.Errorf("--auth-tokens-file: %w", err)
	}
	if a.bare, err = loadBareRecord(principals); err != nil {
		return nil, fmt.Errorf("--auth-tokens-file: %w", err)
	}
	tokens, err := a.parse(raw)
	if err != nil {
		return nil, fmt.Errorf("--auth-tokens-file %s: %w", path, err)
	}
	a.table.Store(&tokens)
	a.lastSum = sha256.Sum256(raw)
	return a, nil
}

// parse parses a tokens file and gives its bare tokens their principals
// (bare.go), saving what was given for the first time before the tokens
// are used: a principal is never handed out that a restart could hand to
// another token. A file that does not parse, or a record that cannot be
// saved, changes nothing. a.mu is held (or a is not shared yet).
func (a *Authenticator) parse(raw []byte) ([]authToken, error) {
	tokens, err := parseTokens(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	next, err := a.bare.assign(tokens, a.log)
	if err != nil {
		return nil, err
	}
	if next != nil {
		if err := next.save(); err != nil {
			return nil, err
		}
		a.bare = next
	}
	return tokens, nil
}

// parseTokens reads a tokens file. Each line, after trimming, is empty, a
// comment (#...), or one of
//
//	<name> <token>          principal User:<name>
//	<name> sha256:<hex>     the same, holding the token's SHA-256 instead
//	<token>                 principal User:token-<n> (given by bare.go)
//
// The sha256: prefix is matched in any case, and a bare token starting with
// it is refused: the text of a hash must never log in.
//
// A name may have several tokens (to rotate one without downtime); a token
// may appear only once. Errors name the line, never its content.
func parseTokens(r io.Reader) ([]authToken, error) {
	var tokens []authToken
	seen := make(map[[sha256.Size]byte]int)
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var t authToken
		switch f := strings.Fields(line); len(f) {
		case 1:
			if _, hashed := cutHashPrefix(f[0]); hashed {
				// Taken as a bare token, the hash text itself would
				// log in: anyone who saw the file could use it.
				return nil, fmt.Errorf("line %d: a hashed token needs a name (\"<name> sha256:<hex>\")", n)
			}
			t = authToken{sum: sha256.Sum256([]byte(f[0])), user: "User:token-" + strconv.Itoa(n), bare: true}
		case 2:
			if err := validTokenName(f[0]); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			t.user = "User:" + f[0]
			if h, ok := cutHashPrefix(f[1]); ok {
				sum, err := hex.DecodeString(h)
				if err != nil || len(sum) != sha256.Size {
					return nil, fmt.Errorf("line %d: sha256: must be followed by the 64 hex digits of the token's SHA-256", n)
				}
				copy(t.sum[:], sum)
			} else {
				t.sum = sha256.Sum256([]byte(f[1]))
			}
		default:
			return nil, fmt.Errorf("line %d: want \"<name> <token>\", \"<name> sha256:<hex>\" or \"<token>\", got %d words", n, len(f))
		}
		if prev, dup := seen[t.sum]; dup {
			return nil, fmt.Errorf("line %d: the same token as line %d", n, prev)
		}
		// A named line "token-<n>" that names a bare token's principal is
		// refused by bareRecord.assign, which knows the bare principals.
		seen[t.sum] = n
		t.line = n
		tokens = append(tokens, t)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, errors.New("holds no token")
	}
	return tokens, nil
}

// cutHashPrefix cuts the "sha256:" of a hashed token, in any case: a file
// of hashes may be readable by others, so "SHA256:<hex>" must not be taken
// for a literal token that the hash text itself would match.
func cutHashPrefix(s string) (string, bool) {
	const prefix = "sha256:"
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// validTokenName refuses names that would read as something else: the
// anonymous principal, the ACL wildcard, a doubled "User:" prefix, or a
// name that cannot be listed in --super-users.
func validTokenName(name string) error {
	switch {
	case name == "ANONYMOUS":
		return errors.New(`the name ANONYMOUS is the principal of calls without credentials`)
	case name == "*":
		return errors.New(`the name * is the wildcard of ACL bindings`)
	case name == instanceName:
		return errors.New(`the name ` + instanceName + ` is the principal of calls between the instances of a cluster`)
	case strings.HasPrefix(name, "User:"):
		return errors.New(`write the name without "User:" (it is added)`)
	case strings.ContainsAny(name, ","):
		return errors.New("a name must not contain a comma")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return errors.New("a name must not contain control characters")
		}
	}
	return nil
}

// TokensEnabled reports whether --auth-tokens-file is set: then every call
// needs a credential. It never changes after start: reloading the file
// cannot turn authentication off.
func (a *Authenticator) TokensEnabled() bool { return a.path != "" }

// ClientCerts reports whether verified client certificates name principals
// (--tls-client-ca).
func (a *Authenticator) ClientCerts() bool { return a.clientCerts }

// Enabled reports whether calls are authenticated at all (tokens or client
// certificates).
func (a *Authenticator) Enabled() bool { return a.TokensEnabled() || a.clientCerts }

// Reload re-reads the tokens file now, even if unchanged. A file that
// cannot be read or parsed keeps the tokens in force; the error is logged
// and returned.
func (a *Authenticator) Reload() error { return a.reload(true) }

// reload re-reads the tokens file; unless force, an unchanged file is not
// parsed again. A file that cannot be read or parsed keeps the previous
// table; the error is logged once per distinct problem.
func (a *Authenticator) reload(force bool) error {
	if a.path == "" {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	raw, err := readTokensFile(a.path)
	if err == nil {
		sum := sha256.Sum256(raw)
		if !force && sum == a.lastSum {
			return nil
		}
		a.lastSum = sum
		var tokens []authToken
		if tokens, err = a.parse(raw); err == nil {
			a.table.Store(&tokens)
			a.endRevoked()
			a.lastErr = ""
			a.log.Info("auth tokens reloaded", "file", a.path, "tokens", len(tokens), "principals", countUsers(tokens))
			return nil
		}
		if errors.Is(err, errRecordNotSaved) {
			// The data dir's fault, not the file's: tried again at the
			// next check even if the file stays as it is.
			a.lastSum = [sha256.Size]byte{}
		}
	}
	err = fmt.Errorf("--auth-tokens-file %s: %w", a.path, err)
	if force || err.Error() != a.lastErr {
		a.log.Error("auth tokens file not reloaded: the previous tokens stay in force", "err", err)
	}
	a.lastErr = err.Error()
	return err
}

func countUsers(tokens []authToken) int {
	users := make(map[string]bool, len(tokens))
	for _, t := range tokens {
		users[t.user] = true
	}
	return len(users)
}

// Watch reloads the tokens file whenever it changes (checked every
// ReloadInterval), until stop closes. Without a tokens file it returns at
// once.
func (a *Authenticator) Watch(stop <-chan struct{}) {
	if !a.TokensEnabled() {
		return
	}
	t := time.NewTicker(ReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			_ = a.reload(false)
		}
	}
}

// identify validates an "Authorization: Bearer <token>" value (the scheme
// word in any case) and returns the token's principal.
func (a *Authenticator) identify(header string) (string, bool) {
	user, _, ok := a.identifyCall(header)
	return user, ok
}

// identifyCall is identify that also returns, for a token of the tokens
// file, its SHA-256 (nil for the instance secret, which no reload revokes),
// so that the call can be bound to it (revoke.go).
func (a *Authenticator) identifyCall(header string) (string, *[sha256.Size]byte, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", nil, false
	}
	return a.lookup(strings.TrimSpace(token))
}

// token returns a token's principal. Every token is compared, in constant
// time.
func (a *Authenticator) token(token string) (string, bool) {
	user, _, ok := a.lookup(token)
	return user, ok
}

// lookup is token that also returns the SHA-256 of a token of the tokens
// file (nil for the instance secret).
func (a *Authenticator) lookup(token string) (string, *[sha256.Size]byte, bool) {
	tokens := a.table.Load()
	if token == "" || tokens == nil {
		return "", nil, false
	}
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i, t := range *tokens {
		found = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(sum[:], t.sum[:]), i, found)
	}
	if found >= 0 {
		return (*tokens)[found].user, &sum, true
	}
	if inst := a.instance.Load(); inst != nil && subtle.ConstantTimeCompare(sum[:], inst[:]) == 1 {
		return InstancePrincipal, nil, true
	}
	return "", nil, false
}

// InstancePrincipal is the principal of a call an instance of the cluster
// makes on its own behalf (docs/cluster.md); no token may be named so.
const InstancePrincipal = "User:" + instanceName

const instanceName = "sharelog-instance"

// SetInstanceSecret makes the cluster's instance secret a credential, of
// principal InstancePrincipal.
func (a *Authenticator) SetInstanceSecret(secret string) {
	sum := sha256.Sum256([]byte(secret))
	a.instance.Store(&sum)
}

// IsInstanceSecret reports, in constant time, whether proof is the
// cluster's instance secret (false before SetInstanceSecret).
func (a *Authenticator) IsInstanceSecret(proof string) bool {
	sum := sha256.Sum256([]byte(proof))
	inst := a.instance.Load()
	return inst != nil && subtle.ConstantTimeCompare(sum[:], inst[:]) == 1
}

// Token is the principal of a bearer token a listener's protocol carried
// (without the "Bearer" word): Unauthenticated if the token is unknown, or
// if there are no tokens (--auth-tokens-file unset) to know it by. Every
// token is compared, in constant time.
func (a *Authenticator) Token(token string) (string, error) {
	if user, ok := a.token(token); ok {
		return user, nil
	}
	return "", apierr.New(apierr.Unauthenticated, "unknown token")
}

// WithoutToken is the principal of a call that presented no token, given
// certUser, the principal its verified client certificate names
// (CertPrincipal; "" if none): certUser, else "" (anonymous) when
// authentication is off; Unauthenticated when tokens are required or the
// certificate names nobody.
func (a *Authenticator) WithoutToken(certUser string) (string, error) {
	if certUser != "" {
		return certUser, nil
	}
	if a.TokensEnabled() {
		return "", apierr.New(apierr.Unauthenticated, "a valid bearer token is required (authorization: Bearer <token>)")
	}
	if a.clientCerts {
		// Every connection presented a verified certificate; one that
		// names nobody must not become User:ANONYMOUS.
		return "", apierr.New(apierr.Unauthenticated, "the client certificate names no principal (it needs a URI SAN, a DNS SAN or a subject CN)")
	}
	return "", nil
}

// authenticate returns the principal of a gRPC call ("" = anonymous) from
// its authorization metadata and certUser, the principal its verified
// client certificate names ("" if none). A token wins over a certificate;
// a token that is not known fails the call even with a certificate.
// Without --auth-tokens-file the authorization metadata is not read.
func (a *Authenticator) authenticate(ctx context.Context, certUser string) (string, error) {
	user, _, err := a.authenticateCall(ctx, certUser)
	return user, err
}

// authenticateCall is authenticate that also returns the SHA-256 of the
// call's token when it is one of the tokens file (nil otherwise), for the
// gate to bind the call to it (revoke.go).
func (a *Authenticator) authenticateCall(ctx context.Context, certUser string) (string, *[sha256.Size]byte, error) {
	if a.TokensEnabled() {
		md, _ := metadata.FromIncomingContext(ctx)
		switch v := md.Get("authorization"); len(v) {
		case 0:
		case 1:
			if user, sum, ok := a.identifyCall(v[0]); ok {
				return user, sum, nil
			}
			return "", nil, apierr.New(apierr.Unauthenticated, "unknown token (authorization: Bearer <token>)")
		default:
			return "", nil, apierr.New(apierr.Unauthenticated, "more than one authorization value")
		}
	}
	user, err := a.WithoutToken(certUser)
	return user, nil, err
}

// HTTPPrincipal is the principal of a plain HTTP request (not the
// gateway's, whose calls are checked by the gRPC Gate): its one bearer
// token when tokens are configured, else its verified certificate; ok is
// false when authentication is on and the request has no valid credential.
// Without authentication every request is User:ANONYMOUS.
func (a *Authenticator) HTTPPrincipal(r *http.Request) (user string, ok bool) {
	if a.TokensEnabled() {
		switch v := r.Header.Values("Authorization"); len(v) {
		case 0:
		case 1:
			return a.identify(v[0])
		default:
			return "", false
		}
	}
	if !a.Enabled() {
		return principal.Anonymous, true
	}
	user = CertPrincipal(r.TLS)
	return user, user != ""
}

// HTTPAllowed reports whether a plain HTTP request carries a valid
// credential (or needs none).
func (a *Authenticator) HTTPAllowed(r *http.Request) bool {
	_, ok := a.HTTPPrincipal(r)
	return ok
}

// CertPrincipal is the principal a verified client certificate names:
// "User:" and its first URI SAN (a SPIFFE ID, say), else its first DNS SAN,
// else its subject CN; "" without a verified certificate, or when that name
// is ANONYMOUS, * or holds a control character. Only the verified chain is
// read: a certificate the handshake did not verify names nobody.
func CertPrincipal(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	leaf := cs.VerifiedChains[0][0]
	var name string
	switch {
	case len(leaf.URIs) > 0:
		name = leaf.URIs[0].String()
	case len(leaf.DNSNames) > 0:
		name = leaf.DNSNames[0]
	default:
		name = leaf.Subject.CommonName
	}
	if name == "" || name == "ANONYMOUS" || name == "*" || strings.ContainsFunc(name, isControl) {
		// Nobody: not the anonymous principal, not the ACL wildcard, and
		// nothing that could forge a line of the logs.
		return ""
	}
	return "User:" + name
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// peerCertPrincipal is CertPrincipal of a gRPC call's TLS connection.
func peerCertPrincipal(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return ""
	}
	return CertPrincipal(&info.State)
}

// LoadTLS is the servers' TLS configuration from --tls-cert and --tls-key
// and, when clientCA (--tls-client-ca) is set, the CA bundle verified
// client certificates must chain to: every connection then presents one.
func LoadTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("--tls-client-ca holds no PEM certificate")
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		// A resumed session is not verified again: with client
		// certificates naming principals, every connection does a full
		// handshake.
		tc.SessionTicketsDisabled = true
	}
	return tc, nil
}
