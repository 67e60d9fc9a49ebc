package testsupport_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// The stacks close everything they start at cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStack(t *testing.T) {
	s := testsupport.NewStack(t, testsupport.StackOptions{}, func(c *app.Config) { c.MaxLongPolls = 3 })
	ctx := context.Background()
	_, err := s.Log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "t", Partitions: 1})
	require.NoError(t, err)

	resp, err := s.HTTP.Client().Get(s.HTTP.URL + "/v1/topics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the gateway reaches the gRPC server")
	assert.DirExists(t, s.DataDir)

	// A long poll shows in the gauge AwaitLongPolls watches.
	fetched := make(chan error, 1)
	go func() {
		_, err := s.Log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", MaxWaitMs: 10_000})
		fetched <- err
	}()
	testsupport.AwaitLongPolls(t, s.HTTP.Client(), s.HTTP.URL, 1)
	p := int32(0)
	_, err = s.Log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p, Records: []*sharelogv1.Record{{Value: []byte("v")}}})
	require.NoError(t, err)
	require.NoError(t, <-fetched)
}

func TestServeAndReadyz(t *testing.T) {
	srv := testsupport.Serve(t)
	took := testsupport.WaitReadyz(t, srv.HTTPAddr(), "", 5*time.Second)
	assert.Less(t, took, 5*time.Second)
	code, _, err := testsupport.Readyz(srv.HTTPAddr())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)

	conn := testsupport.Dial(t, srv.GRPCAddr(), testsupport.FastReconnect())
	_, err = sharelogv1.NewLogServiceClient(conn).ListTopics(context.Background(), &sharelogv1.ListTopicsRequest{})
	require.NoError(t, err)
}

// The CA's server and client certificates complete a mutual TLS handshake.
func TestCA(t *testing.T) {
	ca := testsupport.NewCA(t)
	srvPair, _, _ := ca.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "server"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, x509.ExtKeyUsageServerAuth)
	certFile, keyFile := ca.IssueFiles(t, t.TempDir(), "client", x509.ExtKeyUsageClientAuth)
	cliPair, err := tls.LoadX509KeyPair(certFile, keyFile)
	require.NoError(t, err)

	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{srvPair},
		ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	defer lis.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err == nil {
			err = c.(*tls.Conn).Handshake()
			c.Close()
		}
		accepted <- err
	}()
	c, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{cliPair},
		ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	require.NoError(t, c.Handshake())
	c.Close()
	require.NoError(t, <-accepted)
}

func TestAcquired(t *testing.T) {
	resp := &sharelogv1.ShareFetchResponse{Responses: []*sharelogv1.ShareFetchTopicResponse{
		{Topic: "a", Partitions: []*sharelogv1.ShareFetchPartitionResponse{
			{Partition: 0, AcquiredRecords: []*sharelogv1.AcquiredRecords{{FirstOffset: 0, LastOffset: 4, DeliveryCount: 1}}},
			{Partition: 1, AcquiredRecords: []*sharelogv1.AcquiredRecords{{FirstOffset: 7, LastOffset: 7, DeliveryCount: 2}}},
		}},
	}}
	assert.Equal(t, []testsupport.Range{{First: 7, Last: 7, Count: 2}}, testsupport.Acquired(testsupport.PartitionOf(resp, "a", 1)))
	assert.Equal(t, []testsupport.Range{{First: 0, Last: 4, Count: 1}, {First: 7, Last: 7, Count: 2}}, testsupport.AcquiredAll(resp))
	assert.Nil(t, testsupport.PartitionOf(resp, "b", 0))
}
