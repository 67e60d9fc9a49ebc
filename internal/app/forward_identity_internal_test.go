package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/principal"
)

// tlsPeer is a context whose gRPC peer verified leaf.
func tlsPeer(leaf *x509.Certificate, md metadata.MD) context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 5000},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}}})
	return metadata.NewIncomingContext(ctx, md)
}

// In cluster mode with client certificates, a standby forwards a call
// under its own certificate; the active instance takes the caller's
// principal from the forwarding metadata only when the peer presents this
// instance's own certificate (the instances share it), never from a
// client, which cannot hold that certificate's key.
func TestForwardedCertificatePrincipal(t *testing.T) {
	self := &x509.Certificate{Raw: []byte("instance certificate"), Subject: pkix.Name{CommonName: "sharelog"}}
	client := &x509.Certificate{Raw: []byte("mallory's certificate"), Subject: pkix.Name{CommonName: "mallory"}}
	auth, err := edge.NewAuthenticator("", "", true, nil)
	require.NoError(t, err)
	g := edge.NewGate(edge.GateConfig{Auth: auth, Self: self.Raw})
	forwarded := metadata.Pairs(edge.MDForwardedPrincipal, "User:alice")
	// admit runs the gate and returns the context its handler sees.
	admit := func(ctx context.Context, method string) (context.Context, error) {
		var seen context.Context
		_, err := g.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, _ any) (any, error) {
			seen = ctx
			return nil, nil
		})
		return seen, err
	}

	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"forwarded by an instance", tlsPeer(self, forwarded), "User:alice"},
		{"an instance's own call", tlsPeer(self, metadata.MD{}), "User:sharelog"},
		{"a client claiming to forward", tlsPeer(client, forwarded), "User:mallory"},
		{"a client with a certificate of the same name", tlsPeer(&x509.Certificate{Raw: []byte("other"), Subject: pkix.Name{CommonName: "sharelog"}}, forwarded), "User:sharelog"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, err := admit(tc.ctx, "/sharelog.v1.LogService/ListTopics")
			require.NoError(t, err)
			assert.Equal(t, tc.want, principal.User(ctx))
			md, _ := metadata.FromIncomingContext(ctx)
			assert.Empty(t, md.Get(edge.MDForwardedPrincipal), "the claim is not passed on")
		})
	}

	// The forwarding side names the caller's principal.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	n := &clusterNode{s: &Server{grpcListener: lis}}
	n.s.cfg.Cluster.InstanceID = "standby-1"
	in := metadata.NewIncomingContext(principal.WithUser(context.Background(), "User:alice"), metadata.MD{})
	out, _ := metadata.FromOutgoingContext(n.outgoing(in))
	assert.Equal(t, []string{"User:alice"}, out.Get(edge.MDForwardedPrincipal))
	out, _ = metadata.FromOutgoingContext(n.outgoing(metadata.NewIncomingContext(context.Background(), metadata.MD{})))
	assert.Empty(t, out.Get(edge.MDForwardedPrincipal), "an anonymous call names nobody")
}
