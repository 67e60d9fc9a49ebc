package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// mtlsClient is one client certificate's gRPC and HTTPS clients.
type mtlsClient struct {
	sg   sharelogv1.ShareGroupServiceClient
	log  sharelogv1.LogServiceClient
	http *http.Client
}

// With --tls-client-ca the verified client certificate names the
// principal, over gRPC and over REST (the gateway carries it, and a
// client cannot forge it); a token wins over the certificate.
func TestClientCertificatePrincipal(t *testing.T) {
	t.Parallel()
	ca := testsupport.NewCA(t)
	dir := t.TempDir()
	_, srvCert, srvKey := ca.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "server"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, x509.ExtKeyUsageServerAuth)
	files := map[string][]byte{"ca.pem": ca.PEM, "server.pem": srvCert, "server.key": srvKey, "tokens": []byte("dave tok-dave\n")}
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	srv := testsupport.Serve(t, func(cfg *app.Config) {
		cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.pem")
		cfg.AuthTokensFile = filepath.Join(dir, "tokens")
	})

	client := func(tmpl *x509.Certificate) mtlsClient {
		pair, _, _ := ca.Issue(t, tmpl, x509.ExtKeyUsageClientAuth)
		tc := &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
		conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		require.NoError(t, err)
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc.Clone()}}
		t.Cleanup(func() {
			conn.Close()
			hc.CloseIdleConnections()
		})
		return mtlsClient{sg: sharelogv1.NewShareGroupServiceClient(conn), log: sharelogv1.NewLogServiceClient(conn), http: hc}
	}
	spiffe, _ := url.Parse("spiffe://example.org/alice")
	alice := client(&x509.Certificate{URIs: []*url.URL{spiffe}, DNSNames: []string{"not-alice.example.org"}, Subject: pkix.Name{CommonName: "not-alice"}})
	bob := client(&x509.Certificate{DNSNames: []string{"bob.example.org"}, Subject: pkix.Name{CommonName: "not-bob"}})
	carol := client(&x509.Certificate{Subject: pkix.Name{CommonName: "carol"}})

	ctx := context.Background()
	_, err := alice.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "q", Partitions: 1})
	require.NoError(t, err, "a certificate alone authenticates, tokens configured or not")
	hb, err := alice.sg.ShareGroupHeartbeat(ctx, hbReq("g", "m", 0, "q"))
	require.NoError(t, err)
	epoch := hb.GetMemberEpoch()
	_, err = bob.sg.ShareGroupHeartbeat(ctx, hbReq("g", "m", epoch))
	requireReason(t, err, codes.NotFound, "UNKNOWN_MEMBER_ID")
	_, err = carol.sg.ShareGroupHeartbeat(ctx, hbReq("g", "m", epoch))
	requireReason(t, err, codes.NotFound, "UNKNOWN_MEMBER_ID")

	rest := func(c mtlsClient, path, body string, header ...string) restResponse {
		req, err := http.NewRequest(http.MethodPost, "https://"+srv.HTTPAddr()+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.http.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		return restFrom(t, resp)
	}
	hbBody := `{"memberId":"m","memberEpoch":` + strconv.Itoa(int(epoch)) + `}`
	r := rest(alice, "/v1/share-groups/g:heartbeat", hbBody)
	require.Equal(t, http.StatusOK, r.Status, "alice's certificate over REST is alice: %s", r.Raw)
	requireRESTError(t, rest(bob, "/v1/share-groups/g:heartbeat", hbBody,
		"Grpc-Metadata-Sharelog-Client-Principal", "User:spiffe://example.org/alice"), http.StatusNotFound, "UNKNOWN_MEMBER_ID")

	// A token wins over the certificate, and an unknown one fails even
	// with a good certificate.
	dave := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok-dave")
	_, err = alice.sg.ShareGroupHeartbeat(dave, hbReq("g", "m", epoch))
	requireReason(t, err, codes.NotFound, "UNKNOWN_MEMBER_ID")
	_, err = alice.sg.ShareGroupHeartbeat(dave, hbReq("g", "d", 0, "q"))
	require.NoError(t, err)
	_, err = carol.sg.ShareGroupHeartbeat(dave, hbReq("g", "d", -1))
	require.NoError(t, err, "dave's member, whatever certificate carries his token")
	_, err = alice.sg.ShareGroupHeartbeat(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer nope"), hbReq("g", "m", epoch))
	requireReason(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	requireRESTError(t, rest(alice, "/v1/share-groups/g:heartbeat", hbBody, "Authorization", "Bearer nope"), http.StatusUnauthorized, "UNAUTHENTICATED")
	r = rest(carol, "/v1/share-groups/g:heartbeat", `{"memberId":"d","memberEpoch":0,"subscribedTopicNames":["q"]}`, "Authorization", "Bearer tok-dave")
	require.Equal(t, http.StatusOK, r.Status, "the token over REST: %s", r.Raw)
	requireRESTError(t, rest(carol, "/v1/share-groups/g:heartbeat", `{"memberId":"d","memberEpoch":-1}`), http.StatusNotFound, "UNKNOWN_MEMBER_ID")

	// /metrics: a certificate is a credential there too.
	resp, err := carol.http.Get("https://" + srv.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
