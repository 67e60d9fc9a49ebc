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
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// authenticator checks bearer tokens when --auth-tokens-file is set. The file
// holds one token per line; blank lines and lines starting with # are ignored.
// Health checks are always allowed, so probes need no token.
type authenticator struct {
	tokens [][32]byte // SHA-256 of each token, compared in constant time
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
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		a.tokens = append(a.tokens, sha256.Sum256([]byte(line)))
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

// check validates an "Authorization: Bearer <token>" value.
func (a *authenticator) check(header string) bool {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	match := 0
	for _, t := range a.tokens {
		match |= subtle.ConstantTimeCompare(sum[:], t[:])
	}
	return match == 1
}

func (a *authenticator) authorize(ctx context.Context, method string) error {
	if !a.enabled() || strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if a.check(v) {
			return nil
		}
	}
	st := status.New(codes.Unauthenticated, "a valid bearer token is required (authorization: Bearer <token>)")
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: "UNAUTHENTICATED", Domain: "sharelog"}); err == nil {
		st = withInfo
	}
	return st.Err()
}

func (a *authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (a *authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
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
