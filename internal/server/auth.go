package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/sharelog/sharelog/apierr"
	"google.golang.org/grpc/metadata"
)

// authenticator checks bearer tokens when --auth-tokens-file is set. The file
// holds one token per line; blank lines and lines starting with # are ignored.
// Health checks are always allowed, so probes need no token.
type authenticator struct {
	tokens []authToken
}

// authToken is one accepted token: its SHA-256 (compared in constant time)
// and the client identity it stands for, "token-<line number>", which is
// safe to log and to key per-client limits by (the token never is).
type authToken struct {
	sum [32]byte
	id  string
}

func newAuthenticator(path string) (*authenticator, error) {
	a := &authenticator{}
	if path == "" {
		return a, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--auth-tokens-file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		a.tokens = append(a.tokens, authToken{sum: sha256.Sum256([]byte(line)), id: "token-" + strconv.Itoa(n)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--auth-tokens-file: %w", err)
	}
	if len(a.tokens) == 0 {
		return nil, errors.New("--auth-tokens-file holds no token")
	}
	return a, nil
}

func (a *authenticator) enabled() bool { return len(a.tokens) > 0 }

// identify validates an "Authorization: Bearer <token>" value and returns
// the token's identity. Every token is compared, in constant time.
func (a *authenticator) identify(header string) (string, bool) {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return "", false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	found := -1
	for i, t := range a.tokens {
		found = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(sum[:], t.sum[:]), i, found)
	}
	if found < 0 {
		return "", false
	}
	return a.tokens[found].id, true
}

// check validates an "Authorization: Bearer <token>" value.
func (a *authenticator) check(header string) bool {
	_, ok := a.identify(header)
	return ok
}

// authorize checks the call's bearer token (when auth is enabled) and
// returns its identity ("" without auth).
func (a *authenticator) authorize(ctx context.Context) (string, error) {
	if !a.enabled() {
		return "", nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if id, ok := a.identify(v); ok {
			return id, nil
		}
	}
	return "", apierr.New(apierr.Unauthenticated, "a valid bearer token is required (authorization: Bearer <token>)")
}

// httpAllowed reports whether a plain HTTP endpoint (not the gateway, whose
// calls are checked by the gRPC interceptor) may be served.
func (a *authenticator) httpAllowed(r *http.Request) bool {
	return !a.enabled() || a.check(r.Header.Get("Authorization"))
}

func loadTLS(cfg Config) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("--tls-client-ca holds no PEM certificate")
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
