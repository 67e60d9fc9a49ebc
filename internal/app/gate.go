package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/principal"
)

// Metadata the gateway sets for the gRPC server behind it, whose own peer
// is the gateway's in-memory connection. Only that server reads them; the
// gateway forwards no client header that could forge them (incomingHeader),
// and the public server removes any a gRPC client sends.
const (
	// mdClientAddr is the REST client's IP (the direct peer of the HTTP
	// connection): the per-client limits key.
	mdClientAddr = "sharelog-client-addr"
	// mdClientHost is the REST client's host for client_host: the direct
	// peer, or the X-Forwarded-For client when the peer is a trusted proxy.
	mdClientHost = "sharelog-client-host"
	// mdClientPrincipal is the principal the REST client's verified TLS
	// certificate names (with --tls-client-ca).
	mdClientPrincipal = "sharelog-client-principal"
)

// mdForwardedPrincipal is the principal of a call a standby forwards in
// cluster mode (forward.go). The active instance believes it only from a
// peer that presents this instance's own certificate, i.e. another
// instance sharing it (gate.fromInstance); from anyone else it is dropped.
const mdForwardedPrincipal = "sharelog-forwarded-principal"

// mdForwardedFor is the metadata the service reads client_host from; the
// gate replaces whatever the caller sent with the host it trusts.
const mdForwardedFor = "x-forwarded-for"

const healthMethodPrefix = "/grpc.health.v1.Health/"

// gate is the first interceptor of every call after recovery and logging:
//   - health checks need no token but are rate-limited per client IP, and
//     one IP holds at most HealthWatchesPerIP health Watch streams without
//     a credential;
//   - any other call is authenticated (authenticator) and carries its
//     principal (principal.User: "User:<name>", or User:ANONYMOUS without
//     credentials) and its per-client limits key (principal.Name: the
//     principal, or "ip:<address>" for an anonymous caller);
//   - its x-forwarded-for metadata, which the service reads client_host
//     from, is replaced by the client host the server trusts (the peer, or
//     the forwarded client when the peer is in --trusted-proxies);
//   - a request that did not decode fails with INVALID_REQUEST (see
//     requestCodec).
type gate struct {
	auth    *authenticator
	codec   *requestCodec
	health  *ipLimiter
	watches *ipSlots     // open health Watch streams per client IP (nil = no bound)
	audit   *authz.Audit // refused credentials (nil = not logged)
	trusted trustedProxies
	// viaGateway: the server behind the REST gateway, whose client IP,
	// host and certificate principal come from the gateway's metadata.
	viaGateway bool
	// self is the DER of this instance's own TLS certificate (with
	// --tls-client-ca): a peer presenting it is another instance, whose
	// mdForwardedPrincipal names the caller it forwards for.
	self []byte
}

// fromInstance reports whether the call's verified peer certificate is
// this instance's own.
func (g *gate) fromInstance(ctx context.Context) bool { return peerIsSelf(ctx, g.self) }

// peerIsSelf reports whether the call's verified peer certificate is self
// (this instance's own: the call comes from another instance).
func peerIsSelf(ctx context.Context, self []byte) bool {
	if len(self) == 0 {
		return false
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return false
	}
	return bytes.Equal(info.State.VerifiedChains[0][0].Raw, self)
}

// lastMD is the last value of an incoming metadata key ("" if none).
func lastMD(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

func (g *gate) clientIP(ctx context.Context) string {
	if g.viaGateway {
		if v := metadata.ValueFromIncomingContext(ctx, mdClientAddr); len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return hostOf(p.Addr.String())
	}
	return ""
}

func (g *gate) admit(ctx context.Context, method string) (context.Context, error) {
	ip := g.clientIP(ctx)
	if strings.HasPrefix(method, healthMethodPrefix) {
		if !g.health.allow(ip) {
			return ctx, apierr.New(apierr.ThrottlingQuotaExceeded, "%s", healthThrottledMsg)
		}
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	user, err := g.auth.authenticate(ctx, g.certUser(ctx, md))
	if err != nil {
		var e *apierr.Error
		if errors.As(err, &e) {
			g.audit.Unauthenticated(ctx, ip, method, e.Message)
		}
		return ctx, err
	}
	name := user
	if user != "" {
		ctx = principal.WithUser(ctx, user)
	} else if ip != "" {
		name = "ip:" + ip
	}
	return principal.WithName(g.withClientHost(ctx, md, ip), name), nil
}

// certUser is the principal the call's verified client certificate names
// ("" without one, or without --tls-client-ca).
func (g *gate) certUser(ctx context.Context, md metadata.MD) string {
	switch {
	case !g.auth.clientCerts:
		return ""
	case g.viaGateway:
		return lastMD(md, mdClientPrincipal)
	}
	if fwd := lastMD(md, mdForwardedPrincipal); fwd != "" && g.fromInstance(ctx) {
		return fwd
	}
	return peerCertPrincipal(ctx)
}

// credentialed reports whether a call that needs no credential (health)
// carries a valid one anyway.
func (g *gate) credentialed(ctx context.Context) bool {
	if !g.auth.enabled() {
		return false
	}
	md, _ := metadata.FromIncomingContext(ctx)
	user, err := g.auth.authenticate(ctx, g.certUser(ctx, md))
	return err == nil && user != ""
}

// withClientHost replaces the call's x-forwarded-for metadata by the one
// client host the server trusts, and drops the gateway's own metadata
// from a call that did not come through the gateway.
func (g *gate) withClientHost(ctx context.Context, md metadata.MD, ip string) context.Context {
	md = md.Copy()
	md.Delete(mdForwardedPrincipal) // read by admit; never passed on
	host := ip
	if g.viaGateway {
		if h := lastMD(md, mdClientHost); h != "" {
			host = h
		}
	} else {
		if g.trusted.contains(ip) {
			host = g.trusted.clientOf(ip, md.Get(mdForwardedFor))
		}
		md.Delete(mdClientAddr)
		md.Delete(mdClientHost)
		md.Delete(mdClientPrincipal)
	}
	if host != "" {
		md.Set(mdForwardedFor, host)
	} else {
		md.Delete(mdForwardedFor)
	}
	return metadata.NewIncomingContext(ctx, md)
}

// trustedProxies is --trusted-proxies: the peers whose X-Forwarded-For is
// believed for client_host.
type trustedProxies []netip.Prefix

// parseTrustedProxies parses a comma-separated list of CIDRs or addresses.
func parseTrustedProxies(s string) (trustedProxies, error) {
	var out trustedProxies
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR nor an IP address", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

func (t trustedProxies) containsAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// contains reports whether ip (a peer address, as hostOf gives it) is a
// trusted proxy.
func (t trustedProxies) contains(ip string) bool {
	if len(t) == 0 {
		return false
	}
	a, err := netip.ParseAddr(ip)
	return err == nil && t.containsAddr(a)
}

// clientOf is the client behind peer, a trusted proxy, given the
// X-Forwarded-For values: walking the hops from the nearest, the first
// that is not a trusted proxy (every hop before it was appended by a
// trusted proxy, so it is the client as a trusted proxy saw it). If every
// hop is trusted, the farthest; a hop that is not an address ends the walk
// at the last good one.
func (t trustedProxies) clientOf(peer string, forwarded []string) string {
	var hops []string
	for _, v := range forwarded {
		for _, h := range strings.Split(v, ",") {
			hops = append(hops, strings.TrimSpace(h))
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.Trim(hostOf(hops[i]), "[]"))
		if err != nil {
			break
		}
		client = a.Unmap().String()
		if !t.containsAddr(a) {
			break
		}
	}
	return client
}

func (g *gate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	// Taken before anything can fail, so the codec forgets the message.
	decodeErr := g.codec.takeFailure(req)
	ctx, err := g.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if decodeErr != nil {
		return nil, decodeErr
	}
	return handler(ctx, req)
}

func (g *gate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := g.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if info.FullMethod == healthWatchMethod && g.watches != nil && !g.credentialed(ctx) {
		ip := g.clientIP(ctx)
		if !g.watches.acquire(ip) {
			return apierr.New(apierr.ThrottlingQuotaExceeded, "%d health watches are open from this address, the most one address may hold", g.watches.max)
		}
		defer g.watches.release(ip)
	}
	return handler(srv, &gatedStream{ServerStream: ss, ctx: ctx, codec: g.codec})
}

type gatedStream struct {
	grpc.ServerStream
	ctx   context.Context
	codec *requestCodec
}

func (s *gatedStream) Context() context.Context { return s.ctx }

func (s *gatedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if decodeErr := s.codec.takeFailure(m); decodeErr != nil {
		return decodeErr
	}
	return err
}
