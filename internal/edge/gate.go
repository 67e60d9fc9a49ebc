package edge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/principal"
)

// Metadata the REST gateway sets (GatewayMetadata) for the gRPC server
// behind it, whose own peer is the gateway's in-memory connection. Only
// that server (a Gate with ViaGateway) reads them; the gateway forwards no
// client header that could forge them, and the public server removes any
// a gRPC client sends.
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

// MDForwardedPrincipal is the metadata naming the principal of a call an
// instance forwards to another in cluster mode (docs/cluster.md). The
// receiving Gate believes it only from a peer that presents this
// instance's own certificate, i.e. another instance sharing it
// (GateConfig.Self); from anyone else it is dropped.
const MDForwardedPrincipal = "sharelog-forwarded-principal"

// mdForwardedFor is the metadata the service reads client_host from; the
// gate replaces whatever the caller sent with the host it trusts.
const mdForwardedFor = "x-forwarded-for"

const (
	healthMethodPrefix = "/grpc.health.v1.Health/"
	healthWatchMethod  = healthMethodPrefix + "Watch"
)

// HealthThrottledMsg is the message of a health check or probe refused by
// its per-IP rate limit (ThrottlingQuotaExceeded).
const HealthThrottledMsg = "too many health checks from this address; slow down"

// Gate is the first interceptor of every gRPC call after recovery and
// logging (Unary, Stream):
//   - health checks need no token but are rate-limited per client IP
//     (GateConfig.Health), and one IP holds a bounded number of health
//     Watch streams without a credential (GateConfig.HealthWatches);
//   - any other call is authenticated (Authenticator) and carries its
//     principal (principal.User: "User:<name>", or User:ANONYMOUS without
//     credentials) and its per-client limits key (principal.Name: the
//     principal, or "ip:<address>" for an anonymous caller);
//   - its x-forwarded-for metadata, which the service reads client_host
//     from, is replaced by the client host the server trusts (the peer, or
//     the forwarded client when the peer is in --trusted-proxies);
//   - a request that did not decode fails with INVALID_REQUEST (see
//     requestCodec; the server must use Codec).
//
// A Gate serves one gRPC server: each has its own codec.
type Gate struct {
	GateConfig
	codec *requestCodec
}

// GateConfig is what a Gate is built from.
type GateConfig struct {
	Auth *Authenticator
	// Health rate-limits health checks per client IP (nil = no limit).
	Health *IPLimiter
	// HealthWatches bounds the open health Watch streams without a
	// credential per client IP (nil = no bound).
	HealthWatches *IPSlots
	// Audit logs refused credentials (nil = not logged).
	Audit *authz.Audit
	// Trusted is --trusted-proxies: peers whose x-forwarded-for is
	// believed for client_host.
	Trusted TrustedProxies
	// ViaGateway: the server behind the REST gateway, whose client IP,
	// host and certificate principal come from the gateway's metadata
	// (GatewayMetadata).
	ViaGateway bool
	// Self is the DER of this instance's own TLS certificate (with
	// --tls-client-ca): a peer presenting it is another instance, whose
	// MDForwardedPrincipal names the caller it forwards for.
	Self []byte
}

// NewGate returns a gate for one gRPC server, which must decode with the
// gate's Codec.
func NewGate(c GateConfig) *Gate {
	return &Gate{GateConfig: c, codec: newRequestCodec()}
}

// Codec is the server codec the gate's server must use
// (grpc.ForceServerCodecV2): it lets the gate fail an undecodable request
// with INVALID_REQUEST rather than grpc-go's INTERNAL.
func (g *Gate) Codec() encoding.CodecV2 { return g.codec }

// fromInstance reports whether the call's verified peer certificate is
// this instance's own.
func (g *Gate) fromInstance(ctx context.Context) bool { return PeerIsSelf(ctx, g.Self) }

// PeerIsSelf reports whether the gRPC call's verified peer certificate is
// self (this instance's own: the call comes from another instance).
func PeerIsSelf(ctx context.Context, self []byte) bool {
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

func (g *Gate) clientIP(ctx context.Context) string {
	if g.ViaGateway {
		if v := metadata.ValueFromIncomingContext(ctx, mdClientAddr); len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return HostOf(p.Addr.String())
	}
	return ""
}

// admit authenticates a call and names its client. It also returns the
// SHA-256 of the call's token when that is one of the tokens file (nil
// otherwise), to which the call is bound so that revoking the token ends it.
func (g *Gate) admit(ctx context.Context, method string) (context.Context, *[sha256.Size]byte, error) {
	ip := g.clientIP(ctx)
	if strings.HasPrefix(method, healthMethodPrefix) {
		if !g.Health.Allow(ip) {
			return ctx, nil, apierr.New(apierr.ThrottlingQuotaExceeded, "%s", HealthThrottledMsg)
		}
		// Health needs no credential; one it carries binds it all the same.
		return ctx, g.Auth.bearerSum(ctx), nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	user, sum, err := g.Auth.authenticateCall(ctx, g.certUser(ctx, md))
	if err != nil {
		var e *apierr.Error
		if errors.As(err, &e) {
			g.Audit.Unauthenticated(ctx, ip, method, e.Message)
		}
		return ctx, nil, err
	}
	name := user
	if user != "" {
		ctx = principal.WithUser(ctx, user)
	} else if ip != "" {
		name = "ip:" + ip
	}
	return principal.WithName(g.withClientHost(ctx, md, ip), name), sum, nil
}

// certUser is the principal the call's verified client certificate names
// ("" without one, or without --tls-client-ca).
func (g *Gate) certUser(ctx context.Context, md metadata.MD) string {
	switch {
	case !g.Auth.clientCerts:
		return ""
	case g.ViaGateway:
		return lastMD(md, mdClientPrincipal)
	}
	if fwd := lastMD(md, MDForwardedPrincipal); fwd != "" && g.fromInstance(ctx) {
		return fwd
	}
	return peerCertPrincipal(ctx)
}

// credentialed reports whether a call that needs no credential (health)
// carries a valid one anyway.
func (g *Gate) credentialed(ctx context.Context) bool {
	if !g.Auth.Enabled() {
		return false
	}
	md, _ := metadata.FromIncomingContext(ctx)
	user, err := g.Auth.authenticate(ctx, g.certUser(ctx, md))
	return err == nil && user != ""
}

// withClientHost replaces the call's x-forwarded-for metadata by the one
// client host the server trusts, and drops the gateway's own metadata
// from a call that did not come through the gateway.
func (g *Gate) withClientHost(ctx context.Context, md metadata.MD, ip string) context.Context {
	md = md.Copy()
	md.Delete(MDForwardedPrincipal) // read by admit; never passed on
	host := ip
	if g.ViaGateway {
		if h := lastMD(md, mdClientHost); h != "" {
			host = h
		}
	} else {
		if g.Trusted.contains(ip) {
			host = g.Trusted.clientOf(ip, md.Get(mdForwardedFor))
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

// TrustedProxies is --trusted-proxies: the peers whose X-Forwarded-For is
// believed for client_host.
type TrustedProxies []netip.Prefix

// ParseTrustedProxies parses a comma-separated list of CIDRs or addresses.
func ParseTrustedProxies(s string) (TrustedProxies, error) {
	var out TrustedProxies
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

func (t TrustedProxies) containsAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// contains reports whether ip (a peer address, as HostOf gives it) is a
// trusted proxy.
func (t TrustedProxies) contains(ip string) bool {
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
func (t TrustedProxies) clientOf(peer string, forwarded []string) string {
	var hops []string
	for _, v := range forwarded {
		for _, h := range strings.Split(v, ",") {
			hops = append(hops, strings.TrimSpace(h))
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.Trim(HostOf(hops[i]), "[]"))
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

// Unary is the gate as a unary server interceptor.
func (g *Gate) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	// Taken before anything can fail, so the codec forgets the message.
	decodeErr := g.codec.takeFailure(req)
	ctx, sum, err := g.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if decodeErr != nil {
		return nil, decodeErr
	}
	if sum != nil {
		var release func()
		ctx, release = g.Auth.bind(ctx, *sum)
		defer release()
		resp, err := handler(ctx, req)
		if revoked(ctx) {
			// A long poll cut short answers as the call would now.
			return nil, revokedError()
		}
		return resp, err
	}
	return handler(ctx, req)
}

// Stream is the gate as a stream server interceptor.
func (g *Gate) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, sum, err := g.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if info.FullMethod == healthWatchMethod && g.HealthWatches != nil && !g.credentialed(ctx) {
		ip := g.clientIP(ctx)
		if !g.HealthWatches.Acquire(ip) {
			return apierr.New(apierr.ThrottlingQuotaExceeded, "%d health watches are open from this address, the most one address may hold", g.HealthWatches.max)
		}
		defer g.HealthWatches.Release(ip)
	}
	if sum != nil {
		var release func()
		ctx, release = g.Auth.bind(ctx, *sum)
		defer release()
		err := handler(srv, &gatedStream{ServerStream: ss, ctx: ctx, codec: g.codec})
		if revoked(ctx) {
			return revokedError()
		}
		return err
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

// GatewayMetadata is the metadata the REST gateway adds to every call it
// makes for r, for the Gate with ViaGateway behind it: the direct peer's
// IP (the per-client limits key), the client host (the X-Forwarded-For
// client when the peer is a trusted proxy, else the peer) and the
// principal of the verified client certificate, if any.
func GatewayMetadata(r *http.Request, trusted TrustedProxies) metadata.MD {
	ip := HostOf(r.RemoteAddr)
	host := ip
	if trusted.contains(ip) {
		host = trusted.clientOf(ip, r.Header.Values("X-Forwarded-For"))
	}
	md := metadata.Pairs(mdClientAddr, ip, mdClientHost, host)
	if user := CertPrincipal(r.TLS); user != "" {
		md.Set(mdClientPrincipal, user)
	}
	return md
}
