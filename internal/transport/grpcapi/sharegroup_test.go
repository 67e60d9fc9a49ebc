package grpcapi

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func TestCallerOf(t *testing.T) {
	tcp := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5555}
	tests := []struct {
		name     string
		md       metadata.MD
		addr     net.Addr
		id, host string
	}{
		{name: "nothing"},
		{name: "gRPC peer: the IP without the port", addr: tcp, host: "10.1.2.3"},
		{name: "client id", md: metadata.Pairs("x-client-id", "app-1"), addr: tcp, id: "app-1", host: "10.1.2.3"},
		{name: "through the gateway: the first forwarded address", md: metadata.Pairs("x-forwarded-for", "192.0.2.7, 127.0.0.1"),
			addr: tcp, host: "192.0.2.7"},
		{name: "an empty forwarded address falls back to the peer", md: metadata.Pairs("x-forwarded-for", " "), addr: tcp, host: "10.1.2.3"},
		{name: "a peer address without a port", addr: fakeAddr("bufconn"), host: "bufconn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.md != nil {
				ctx = metadata.NewIncomingContext(ctx, tt.md)
			}
			if tt.addr != nil {
				ctx = peer.NewContext(ctx, &peer.Peer{Addr: tt.addr})
			}
			id, host := callerOf(ctx)
			assert.Equal(t, tt.id, id)
			assert.Equal(t, tt.host, host)
		})
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return string(a) }
func (a fakeAddr) String() string  { return string(a) }
