package main

import (
	"bytes"
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	xscram "github.com/xdg-go/scram"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// saslScram logs in on kc with SaslHandshake v1 and SaslAuthenticate v2
// rounds of a SCRAM exchange (an xdg-go/scram client); it returns the
// answer that ended the exchange (the error, or the server's final
// message).
func saslScram(kc *kafkaConn, mech, user, pass string) *kmsg.SASLAuthenticateResponse {
	kc.t.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, mech
	hr := kc.do(hs).(*kmsg.SASLHandshakeResponse)
	require.Equal(kc.t, int16(0), hr.ErrorCode, "handshake %s: served %v", mech, hr.SupportedMechanisms)
	h := xscram.SHA256
	if mech == "SCRAM-SHA-512" {
		h = xscram.SHA512
	}
	cl, err := h.NewClient(user, pass, "")
	require.NoError(kc.t, err)
	conv := cl.NewConversation()
	msg, err := conv.Step("")
	require.NoError(kc.t, err)
	for {
		au := kmsg.NewPtrSASLAuthenticateRequest()
		au.Version, au.SASLAuthBytes = 2, []byte(msg)
		resp := kc.do(au).(*kmsg.SASLAuthenticateResponse)
		if resp.ErrorCode != 0 {
			return resp
		}
		msg, err = conv.Step(string(resp.SASLAuthBytes))
		require.NoError(kc.t, err, "the server's message")
		if conv.Done() {
			require.True(kc.t, conv.Valid(), "the server proved it knows the credential")
			return resp
		}
	}
}

// saslScramRaw logs in on kc with SaslHandshake v0 and SCRAM-SHA-512 in
// bare frames; false when the server closed the connection instead of
// answering.
func saslScramRaw(kc *kafkaConn, user, pass string) bool {
	kc.t.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 0, "SCRAM-SHA-512"
	require.Equal(kc.t, int16(0), kc.do(hs).(*kmsg.SASLHandshakeResponse).ErrorCode)
	cl, err := xscram.SHA512.NewClient(user, pass, "")
	require.NoError(kc.t, err)
	conv := cl.NewConversation()
	msg, err := conv.Step("")
	require.NoError(kc.t, err)
	for !conv.Done() {
		_, err = kc.nc.Write(binary.BigEndian.AppendUint32(nil, uint32(len(msg))))
		require.NoError(kc.t, err)
		_, err = kc.nc.Write([]byte(msg))
		require.NoError(kc.t, err)
		var size [4]byte
		if _, err := io.ReadFull(kc.rd, size[:]); err != nil {
			return false
		}
		answer := make([]byte, binary.BigEndian.Uint32(size[:]))
		_, err = io.ReadFull(kc.rd, answer)
		require.NoError(kc.t, err)
		msg, err = conv.Step(string(answer))
		require.NoError(kc.t, err)
	}
	require.True(kc.t, conv.Valid())
	return true
}

// kafkaAdmin is a kadm client logged in with PLAIN.
func kafkaAdmin(t *testing.T, opts ...kgo.Opt) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// pingErr is the error of a ping by a new client with opts.
func pingErr(t *testing.T, opts ...kgo.Opt) error {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

// TestKafkaSASLScram: SCRAM users set over Kafka (AlterUserScramCredentials
// by a PLAIN admin) log in with kgo's SCRAM-SHA-256 and -512 over TLS
// (SASL_SSL) and produce and consume; a wrong password or an unknown user
// is SASL_AUTHENTICATION_FAILED and the connection closes; a deleted
// user's next login and the re-authentication of its live session are
// refused; the credentials survive a restart, and the file holds neither
// the password nor the salted password.
func TestKafkaSASLScram(t *testing.T) {
	k := newKafkaTLS(t, false)
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, "admin adm1n-token\n")
	dir := t.TempDir()
	args := append(k.args, "--auth-tokens-file", tokens, "--kafka-addr", "127.0.0.1:0", "--kafka-auto-create-topics")
	c := startChild(t, dir, args...)
	addr := c.kafkaAddr(t)
	tc := k.clientConfig(t, "")
	tlsOpts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.DialTLSConfig(tc)}
	adm := kafkaAdmin(t, append(tlsOpts, kgo.SASL(plain.Auth{User: "admin", Pass: "adm1n-token"}.AsMechanism()))...)
	ctx := context.Background()

	salt := []byte("bob's salt, sixteen+")
	bobSalted, err := pbkdf2.Key(sha256.New, "b0b-pass", salt, 8192, sha256.Size)
	require.NoError(t, err)
	altered, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "al1ce-pass"},
		{User: "bob", Mechanism: kadm.ScramSha256, Iterations: 8192, Salt: salt, SaltedPassword: bobSalted},
	})
	require.NoError(t, err)
	require.NoError(t, altered.Error())

	// SASL_SSL with SCRAM-SHA-512 and SCRAM-SHA-256.
	produceConsume(t, append(tlsOpts, kgo.SASL(scram.Auth{User: "alice", Pass: "al1ce-pass"}.AsSha512Mechanism()))...)
	require.NoError(t, pingErr(t, append(tlsOpts, kgo.SASL(scram.Auth{User: "bob", Pass: "b0b-pass"}.AsSha256Mechanism()))...))

	// Refused: a wrong password, an unknown user, the right password for
	// the other mechanism.
	for _, m := range []struct {
		name string
		mech func(scram.Auth) kgo.Opt
		auth scram.Auth
	}{
		{"wrong password", func(a scram.Auth) kgo.Opt { return kgo.SASL(a.AsSha512Mechanism()) }, scram.Auth{User: "alice", Pass: "wrong"}},
		{"unknown user", func(a scram.Auth) kgo.Opt { return kgo.SASL(a.AsSha256Mechanism()) }, scram.Auth{User: "nobody", Pass: "b0b-pass"}},
		{"other mechanism", func(a scram.Auth) kgo.Opt { return kgo.SASL(a.AsSha256Mechanism()) }, scram.Auth{User: "alice", Pass: "al1ce-pass"}},
	} {
		err := pingErr(t, append(tlsOpts, m.mech(m.auth))...)
		require.True(t, errors.Is(err, kerr.SaslAuthenticationFailed), "%s: %v", m.name, err)
	}
	kc, err := dialKafkaTLS(t, addr, tc)
	require.NoError(t, err)
	resp := saslScram(kc, "SCRAM-SHA-512", "alice", "wrong")
	require.Equal(t, kerr.SaslAuthenticationFailed.Code, resp.ErrorCode)
	require.NotNil(t, resp.ErrorMessage)
	assert.Contains(t, *resp.ErrorMessage, "invalid credentials")
	closedWithin(t, kc.nc, time.Now(), 5*time.Second)

	// A live session; the user is deleted; its re-authentication is
	// refused and closes the connection; a new login is refused.
	live, err := dialKafkaTLS(t, addr, tc)
	require.NoError(t, err)
	resp = saslScram(live, "SCRAM-SHA-256", "bob", "b0b-pass")
	require.Equal(t, int16(0), resp.ErrorCode)
	assert.Equal(t, int64(time.Hour/time.Millisecond), resp.SessionLifetimeMillis)
	live.do(metadataReq())
	altered, err = adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "bob", Mechanism: kadm.ScramSha256}}, nil)
	require.NoError(t, err)
	require.NoError(t, altered.Error())
	resp = saslScram(live, "SCRAM-SHA-256", "bob", "b0b-pass")
	require.Equal(t, kerr.SaslAuthenticationFailed.Code, resp.ErrorCode, "re-authentication of a deleted user")
	closedWithin(t, live.nc, time.Now(), 5*time.Second)
	err = pingErr(t, append(tlsOpts, kgo.SASL(scram.Auth{User: "bob", Pass: "b0b-pass"}.AsSha256Mechanism()))...)
	require.True(t, errors.Is(err, kerr.SaslAuthenticationFailed), "login of a deleted user: %v", err)

	// Re-authentication must keep the mechanism and the principal.
	altered, err = adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "carol", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "c"}})
	require.NoError(t, err)
	require.NoError(t, altered.Error())
	kc, err = dialKafkaTLS(t, addr, tc)
	require.NoError(t, err)
	require.Equal(t, int16(0), saslScram(kc, "SCRAM-SHA-512", "alice", "al1ce-pass").ErrorCode)
	require.Equal(t, kerr.SaslAuthenticationFailed.Code, saslScram(kc, "SCRAM-SHA-512", "carol", "c").ErrorCode, "re-auth as another user")

	// After a v0 handshake the exchange runs in bare frames (Kafka's
	// pre-KIP-152 form); a refused one closes without an answer.
	for _, pass := range []string{"al1ce-pass", "wrong"} {
		kc, err = dialKafkaTLS(t, addr, tc)
		require.NoError(t, err)
		ok := saslScramRaw(kc, "alice", pass)
		require.Equal(t, pass != "wrong", ok, "raw SCRAM login with %q", pass)
		if ok {
			kc.do(metadataReq())
		}
	}

	// Not stored in clear.
	raw, err := os.ReadFile(filepath.Join(dir, "scram-credentials.json"))
	require.NoError(t, err)
	for _, secret := range [][]byte{[]byte("al1ce-pass"), []byte("c"), bobSalted, []byte(base64.StdEncoding.EncodeToString(bobSalted))} {
		if len(secret) > 2 {
			assert.False(t, bytes.Contains(raw, secret), "the credential file holds %q", secret)
		}
	}
	assert.Contains(t, string(raw), `"alice"`)

	// The credentials survive a restart.
	c.kill(t)
	c = startChild(t, dir, args...)
	tlsOpts[0] = kgo.SeedBrokers(c.kafkaAddr(t))
	require.NoError(t, pingErr(t, append(tlsOpts, kgo.SASL(scram.Auth{User: "alice", Pass: "al1ce-pass"}.AsSha512Mechanism()))...))
	err = pingErr(t, append(tlsOpts, kgo.SASL(scram.Auth{User: "bob", Pass: "b0b-pass"}.AsSha256Mechanism()))...)
	require.True(t, errors.Is(err, kerr.SaslAuthenticationFailed), "the deletion survived too: %v", err)
}

// TestKafkaScramCredentialAPIs: AlterUserScramCredentials and
// DescribeUserScramCredentials answer Kafka's per-user codes, and a user
// any of whose changes is refused gets none of them.
func TestKafkaScramCredentialAPIs(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, "admin adm1n-token\n")
	c := startChild(t, t.TempDir(), "--auth-tokens-file", tokens, "--kafka-addr", "127.0.0.1:0")
	kc := dialKafka(t, c.kafkaAddr(t))
	require.Zero(t, saslPlain(kc, "admin", "adm1n-token").ErrorCode)

	up := func(name string, mech int8, iters int32, salted int) kmsg.AlterUserSCRAMCredentialsRequestUpsertion {
		u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		u.Name, u.Mechanism, u.Iterations, u.Salt, u.SaltedPassword = name, mech, iters, []byte("salt"), make([]byte, salted)
		return u
	}
	del := func(name string, mech int8) kmsg.AlterUserSCRAMCredentialsRequestDeletion {
		d := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
		d.Name, d.Mechanism = name, mech
		return d
	}
	alter := func(dels []kmsg.AlterUserSCRAMCredentialsRequestDeletion, ups ...kmsg.AlterUserSCRAMCredentialsRequestUpsertion) map[string]int16 {
		req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
		req.Deletions, req.Upsertions = dels, ups
		out := map[string]int16{}
		for _, r := range kc.do(req).(*kmsg.AlterUserSCRAMCredentialsResponse).Results {
			out[r.User] = r.ErrorCode
		}
		return out
	}
	describe := func(names ...string) *kmsg.DescribeUserSCRAMCredentialsResponse {
		req := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
		for _, n := range names {
			u := kmsg.NewDescribeUserSCRAMCredentialsRequestUser()
			u.Name = n
			req.Users = append(req.Users, u)
		}
		return kc.do(req).(*kmsg.DescribeUserSCRAMCredentialsResponse)
	}

	assert.Equal(t, map[string]int16{
		"ok":       0,
		"few":      kerr.UnacceptableCredential.Code, // iterations below 4096
		"many":     kerr.UnacceptableCredential.Code, // above 16384
		"short":    kerr.UnacceptableCredential.Code, // a salted password of the wrong size
		"mech":     kerr.UnsupportedSaslMechanism.Code,
		"twice":    kerr.DuplicateResource.Code,
		"":         kerr.UnacceptableCredential.Code,
		"mixed":    kerr.ResourceNotFound.Code, // its deletion refers to nothing: its upsertion is not applied
		"deleteme": kerr.ResourceNotFound.Code,
	}, alter([]kmsg.AlterUserSCRAMCredentialsRequestDeletion{del("mixed", 2), del("deleteme", 1)},
		up("ok", 1, 4096, 32), up("ok", 2, 16384, 64), up("few", 1, 4095, 32), up("many", 1, 16385, 32),
		up("short", 2, 4096, 32), up("mech", 3, 4096, 32), up("twice", 1, 4096, 32), up("twice", 1, 8192, 32),
		up("", 1, 4096, 32), up("mixed", 1, 4096, 32)))

	all := describe()
	require.Zero(t, all.ErrorCode)
	require.Len(t, all.Results, 1, "only the accepted user exists: %+v", all.Results)
	assert.Equal(t, "ok", all.Results[0].User)
	require.Len(t, all.Results[0].CredentialInfos, 2)
	assert.Equal(t, int8(1), all.Results[0].CredentialInfos[0].Mechanism)
	assert.Equal(t, int32(4096), all.Results[0].CredentialInfos[0].Iterations)
	assert.Equal(t, int8(2), all.Results[0].CredentialInfos[1].Mechanism)
	assert.Equal(t, int32(16384), all.Results[0].CredentialInfos[1].Iterations)

	named := describe("ok", "nobody", "dup", "dup")
	require.Zero(t, named.ErrorCode)
	codes := map[string]int16{}
	for _, r := range named.Results {
		codes[r.User] = r.ErrorCode
	}
	assert.Equal(t, map[string]int16{"ok": 0, "nobody": kerr.ResourceNotFound.Code, "dup": kerr.DuplicateResource.Code}, codes)

	assert.Equal(t, map[string]int16{"ok": 0}, alter([]kmsg.AlterUserSCRAMCredentialsRequestDeletion{del("ok", 1)}))
	all = describe()
	require.Len(t, all.Results, 1)
	require.Len(t, all.Results[0].CredentialInfos, 1)
	assert.Equal(t, int8(2), all.Results[0].CredentialInfos[0].Mechanism)
}

// TestKafkaScramReauthentication: kgo re-authenticates a SCRAM session
// before --kafka-sasl-session-lifetime ends (KIP-368) and keeps working;
// once the user is deleted, the next re-authentication fails and the
// client's requests fail with SASL_AUTHENTICATION_FAILED.
func TestKafkaScramReauthentication(t *testing.T) {
	c := startChild(t, t.TempDir(), "--kafka-addr", "127.0.0.1:0", "--kafka-sasl-mechanisms", "SCRAM-SHA-256",
		"--kafka-sasl-session-lifetime", "2s")
	users := sharelogv1.NewUserServiceClient(c.conn)
	ctx := context.Background()
	_, err := users.SetScramCredential(ctx, &sharelogv1.SetScramCredentialRequest{User: "dora", Mechanism: "SCRAM-SHA-256",
		Iterations: 4096, Secret: &sharelogv1.SetScramCredentialRequest_Password{Password: "pw"}})
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaAddr(t)), kgo.SASL(scram.Auth{User: "dora", Pass: "pw"}.AsSha256Mechanism()))
	require.NoError(t, err)
	defer cl.Close()
	meta := func() error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		return err
	}
	require.NoError(t, meta())
	// Past two lifetimes: kgo re-authenticated before each ended, so the
	// server never closed its connection for an expired session.
	time.Sleep(4500 * time.Millisecond)
	require.NoError(t, meta(), "a re-authenticated session")
	assert.False(t, c.loggedClose("the SASL session lifetime passed"), "kgo re-authenticates in time")

	_, err = users.DeleteScramCredential(ctx, &sharelogv1.DeleteScramCredentialRequest{User: "dora", Mechanism: "SCRAM-SHA-256"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return errors.Is(meta(), kerr.SaslAuthenticationFailed) }, 20*time.Second, 500*time.Millisecond,
		"a deleted user's session is refused at its re-authentication")
}
