package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/sharelog/sharelog/internal/testsupport"
)

// kafkaTLS is a CA and the server's certificate files for a child served
// with --tls-cert/--tls-key (and --tls-client-ca when clientCA).
type kafkaTLS struct {
	ca   *testsupport.CA
	dir  string
	args []string
}

func newKafkaTLS(t *testing.T, clientCA bool) *kafkaTLS {
	t.Helper()
	k := &kafkaTLS{ca: testsupport.NewCA(t), dir: t.TempDir()}
	cert, key := k.ca.IssueFiles(t, k.dir, "server", x509.ExtKeyUsageServerAuth)
	k.args = []string{"--tls-cert", cert, "--tls-key", key}
	if clientCA {
		k.args = append(k.args, "--tls-client-ca", k.ca.WriteFile(t, k.dir, "ca.pem"))
	}
	return k
}

// clientConfig is a TLS client configuration trusting the CA, presenting
// a client certificate named cn unless cn is "".
func (k *kafkaTLS) clientConfig(t *testing.T, cn string) *tls.Config {
	t.Helper()
	tc := &tls.Config{RootCAs: k.ca.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if cn != "" {
		certFile, keyFile := k.ca.IssueFiles(t, k.dir, cn, x509.ExtKeyUsageClientAuth)
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		require.NoError(t, err)
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc
}

// dialKafkaTLS is dialKafka over TLS.
func dialKafkaTLS(t *testing.T, addr string, tc *tls.Config) (*kafkaConn, error) {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { nc.Close() })
	// TLS 1.3 reports a refused client certificate only on the first
	// read: the handshake is complete once a request is answered.
	return &kafkaConn{t: t, nc: nc, rd: bufio.NewReader(nc), fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID("ksec-test"))}, nil
}

// produceConsume produces a record to a new topic with cl and reads it
// back.
func produceConsume(t *testing.T, opts ...kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(append(opts, kgo.AllowAutoTopicCreation(), kgo.ConsumeTopics("secured"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "secured", Value: []byte("over tls")}).FirstErr())
	fs := cl.PollFetches(ctx)
	require.NoError(t, fs.Err())
	recs := fs.Records()
	require.Len(t, recs, 1)
	require.Equal(t, "over tls", string(recs[0].Value))
}

// TestKafkaTLSClientCertificates: with --tls-cert and --tls-client-ca the
// Kafka listener serves TLS and requires a client certificate; with one,
// kgo produces and consumes (security protocol SSL); without one the
// connection is refused.
func TestKafkaTLSClientCertificates(t *testing.T) {
	k := newKafkaTLS(t, true)
	c := startChild(t, t.TempDir(), append(k.args, "--kafka-addr", "127.0.0.1:0", "--kafka-auto-create-topics")...)
	addr := c.kafkaAddr(t)

	produceConsume(t, kgo.SeedBrokers(addr), kgo.DialTLSConfig(k.clientConfig(t, "alice")))

	// No client certificate: the handshake (or, in TLS 1.3, the first
	// read after it) fails, and nothing is answered.
	kc, err := dialKafkaTLS(t, addr, k.clientConfig(t, ""))
	if err == nil {
		_, err = kafkaRoundTrip(kc.nc, apiVersions(), 1)
	}
	require.Error(t, err, "a connection without a client certificate was served")

	// Plain TCP to a TLS listener gets no Kafka answer.
	raw := dialKafka(t, addr)
	_, err = kafkaRoundTrip(raw.nc, apiVersions(), 1)
	require.Error(t, err, "a plaintext connection to the TLS listener was answered")
}

func writeTokens(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// saslPlain logs in on kc with SaslHandshake v1 + SaslAuthenticate v2.
func saslPlain(kc *kafkaConn, user, pass string) *kmsg.SASLAuthenticateResponse {
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	hr := kc.do(hs).(*kmsg.SASLHandshakeResponse)
	require.Equal(kc.t, int16(0), hr.ErrorCode)
	require.Equal(kc.t, allMechanisms, hr.SupportedMechanisms, "with tokens, PLAIN and SCRAM are served")
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 2, []byte("\x00"+user+"\x00"+pass)
	return kc.do(au).(*kmsg.SASLAuthenticateResponse)
}

// allMechanisms are the SASL mechanisms served by default with
// --auth-tokens-file.
var allMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

func metadataReq() kmsg.Request {
	r := kmsg.NewPtrMetadataRequest()
	r.Version = 1
	return r
}

// TestKafkaSASLPlain: with --auth-tokens-file the Kafka listener serves
// SASL PLAIN (username = principal name, password = token) over TLS
// (SASL_SSL): kgo produces and consumes with it; a wrong password is
// refused with SASL_AUTHENTICATION_FAILED; a request other than
// ApiVersions and SASL before a login closes the connection; a login
// past its --kafka-sasl-session-lifetime closes the connection at the
// next request; removing the token closes its connections.
func TestKafkaSASLPlain(t *testing.T) {
	k := newKafkaTLS(t, false)
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, "alice s3cret-alice\nbob s3cret-bob\n")
	c := startChild(t, t.TempDir(), append(k.args, "--auth-tokens-file", tokens, "--kafka-addr", "127.0.0.1:0",
		"--kafka-auto-create-topics", "--kafka-sasl-session-lifetime", "3s")...)
	addr := c.kafkaAddr(t)
	tc := k.clientConfig(t, "")

	// SASL_SSL with PLAIN.
	produceConsume(t, kgo.SeedBrokers(addr), kgo.DialTLSConfig(tc),
		kgo.SASL(plain.Auth{User: "alice", Pass: "s3cret-alice"}.AsMechanism()))

	// A wrong password, and a right password under another name.
	for _, creds := range [][2]string{{"alice", "wrong"}, {"bob", "s3cret-alice"}} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(tc),
			kgo.SASL(plain.Auth{User: creds[0], Pass: creds[1]}.AsMechanism()))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = cl.Ping(ctx)
		cancel()
		cl.Close()
		require.True(t, errors.Is(err, kerr.SaslAuthenticationFailed), "%v: %v", creds, err)

		kc, err := dialKafkaTLS(t, addr, tc)
		require.NoError(t, err)
		resp := saslPlain(kc, creds[0], creds[1])
		require.Equal(t, kerr.SaslAuthenticationFailed.Code, resp.ErrorCode)
		closedWithin(t, kc.nc, time.Now(), 5*time.Second)
	}

	// Unauthenticated: ApiVersions is answered, Metadata closes.
	kc, err := dialKafkaTLS(t, addr, tc)
	require.NoError(t, err)
	kc.do(apiVersions())
	_, err = kafkaRoundTrip(kc.nc, metadataReq(), 9)
	require.Error(t, err, "an unauthenticated Metadata request was answered")

	// The lifetime: v2 tells it; a request after it closes the connection.
	kc, err = dialKafkaTLS(t, addr, tc)
	require.NoError(t, err)
	resp := saslPlain(kc, "alice", "s3cret-alice")
	require.Equal(t, int16(0), resp.ErrorCode)
	require.Equal(t, int64(3000), resp.SessionLifetimeMillis)
	kc.do(metadataReq())
	time.Sleep(3500 * time.Millisecond)
	_, err = kafkaRoundTrip(kc.nc, metadataReq(), 99)
	require.Error(t, err, "a request past the session lifetime was answered")

	// Revocation: bob's connection ends within a reload interval of his
	// token leaving the file; alice's stays.
	bob, err := dialKafkaTLS(t, addr, tc)
	require.NoError(t, err)
	require.Equal(t, int16(0), saslPlain(bob, "bob", "s3cret-bob").ErrorCode)
	alice, err := dialKafkaTLS(t, addr, tc)
	require.NoError(t, err)
	require.Equal(t, int16(0), saslPlain(alice, "alice", "s3cret-alice").ErrorCode)
	bob.do(metadataReq())
	writeTokens(t, tokens, "alice s3cret-alice\n")
	took := closedWithin(t, bob.nc, time.Now(), 3*time.Second)
	t.Logf("revoked connection closed after %s", took)
	alice.do(metadataReq())
}
