package users_test

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xdg-go/scram"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/scramcreds"
	"github.com/sharelog/sharelog/internal/users"
)

// login runs a whole exchange between an xdg-go/scram client and u.
func login(t *testing.T, u *users.Users, mech, user, pass string) (string, error) {
	t.Helper()
	h := map[string]scram.HashGeneratorFcn{users.SHA256: scram.SHA256, users.SHA512: scram.SHA512}[mech]
	// Unprepared, as Kafka clients (franz-go, librdkafka) send passwords.
	cl, err := h.NewClientUnprepped(user, pass, "")
	require.NoError(t, err)
	conv := cl.NewConversation()
	srv, err := u.Start(context.Background(), mech)
	require.NoError(t, err)
	msg, err := conv.Step("")
	require.NoError(t, err)
	for !srv.Done() {
		out, err := srv.Step([]byte(msg))
		if err != nil {
			return "", err
		}
		if msg, err = conv.Step(string(out)); err != nil {
			return "", err
		}
	}
	require.True(t, conv.Valid(), "the client verified the server's signature")
	return srv.User(), nil
}

func TestPasswordLogin(t *testing.T) {
	ctx := context.Background()
	for _, mech := range users.Mechanisms {
		t.Run(mech, func(t *testing.T) {
			u := users.New(scramcreds.NewMemStore())
			require.NoError(t, u.SetPassword(ctx, "alice", mech, "s3cret", 0))
			who, err := login(t, u, mech, "alice", "s3cret")
			require.NoError(t, err)
			assert.Equal(t, "User:alice", who)
			// Not SASLprep'd: a ligature and a no-break space stay what
			// they are, as in the clients' PBKDF2.
			require.NoError(t, u.SetPassword(ctx, "zoë", mech, "\ufb01x\u00a0pw", 0))
			_, err = login(t, u, mech, "zoë", "\ufb01x\u00a0pw")
			require.NoError(t, err, "a password with characters SASLprep would change")

			_, err = login(t, u, mech, "alice", "wrong")
			require.ErrorIs(t, err, users.ErrAuthentication)
			_, errUnknown := login(t, u, mech, "nobody", "s3cret")
			require.ErrorIs(t, errUnknown, users.ErrAuthentication)
			assert.Equal(t, err.Error(), errUnknown.Error(), "an unknown user looks like a wrong password")

			other := users.SHA512
			if mech == users.SHA512 {
				other = users.SHA256
			}
			_, err = login(t, u, other, "alice", "s3cret")
			require.ErrorIs(t, err, users.ErrAuthentication, "a credential is for one mechanism")

			require.NoError(t, u.Delete(ctx, "alice", mech))
			_, err = login(t, u, mech, "alice", "s3cret")
			require.ErrorIs(t, err, users.ErrAuthentication, "a deleted user cannot log in")
			assert.Equal(t, apierr.ResourceNotFound, apierr.ReasonOf(u.Delete(ctx, "alice", mech)))
		})
	}
}

// A Kafka client sends PBKDF2(password, salt, iterations); the keys derived
// from it accept the password.
func TestSaltedLogin(t *testing.T) {
	ctx := context.Background()
	u := users.New(scramcreds.NewMemStore())
	salt := []byte("0123456789abcdef")
	salted, err := pbkdf2.Key(sha512.New, "pw", salt, 4096, sha512.Size)
	require.NoError(t, err)
	require.NoError(t, u.SetSalted(ctx, "bob", users.SHA512, salt, salted, 4096))
	who, err := login(t, u, users.SHA512, "bob", "pw")
	require.NoError(t, err)
	assert.Equal(t, "User:bob", who)
	_, err = login(t, u, users.SHA512, "bob", "pw2")
	require.ErrorIs(t, err, users.ErrAuthentication)

	list, err := u.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, []users.User{{Name: "bob", Mechanisms: []users.MechanismInfo{{Mechanism: users.SHA512, Iterations: 4096}}}}, list)
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	u := users.New(scramcreds.NewMemStore())
	for name, tc := range map[string]struct {
		err    error
		reason apierr.Reason
	}{
		"iterations below 4096":  {u.SetPassword(ctx, "a", users.SHA256, "p", 4095), apierr.UnacceptableCredential},
		"iterations above 16384": {u.SetPassword(ctx, "a", users.SHA256, "p", 16385), apierr.UnacceptableCredential},
		"empty user":             {u.SetPassword(ctx, "", users.SHA256, "p", 0), apierr.UnacceptableCredential},
		"empty password":         {u.SetPassword(ctx, "a", users.SHA256, "", 0), apierr.UnacceptableCredential},
		"unknown mechanism":      {u.SetPassword(ctx, "a", "SCRAM-SHA-1", "p", 0), apierr.UnsupportedSaslMechanism},
		"short salted password":  {u.SetSalted(ctx, "a", users.SHA256, []byte("s"), []byte("short"), 4096), apierr.UnacceptableCredential},
		"empty salt":             {u.SetSalted(ctx, "a", users.SHA256, nil, make([]byte, 32), 4096), apierr.UnacceptableCredential},
		"delete unknown mech":    {u.Delete(ctx, "a", "PLAIN"), apierr.UnsupportedSaslMechanism},
	} {
		t.Run(name, func(t *testing.T) { assert.Equal(t, tc.reason, apierr.ReasonOf(tc.err), "%v", tc.err) })
	}
	list, err := u.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, list, "nothing refused was stored")
}

// A malformed first message is refused without touching the store's users.
func TestMalformedExchange(t *testing.T) {
	u := users.New(scramcreds.NewMemStore())
	l, err := u.Start(context.Background(), users.SHA256)
	require.NoError(t, err)
	_, err = l.Step([]byte("garbage"))
	require.Error(t, err)
	assert.NotErrorIs(t, err, users.ErrAuthentication)
	assert.False(t, l.Done())
}

// librdkafka (kcat, confluent-kafka) sends its own nonce in front of the
// whole server nonce in its final message; Kafka accepts that (the nonce
// must end with the server's), and so does this server — the proof covers
// the message as sent. Anything else about the nonce is refused.
func TestLibrdkafkaNonce(t *testing.T) {
	ctx := context.Background()
	u := users.New(scramcreds.NewMemStore())
	require.NoError(t, u.SetPassword(ctx, "bob", users.SHA256, "pw", 4096))
	exchange := func(nonceOf func(cnonce, full string) string, pass string) error {
		l, err := u.Start(ctx, users.SHA256)
		require.NoError(t, err)
		const cnonce = "v{0nQplyPBee5.E6YGevv0sdVKiE>UM]"
		c1bare := "n=bob,r=" + cnonce
		s1, err := l.Step([]byte("n,," + c1bare))
		require.NoError(t, err)
		var full, saltB64 string
		var iters int
		for _, a := range strings.Split(string(s1), ",") {
			switch {
			case strings.HasPrefix(a, "r="):
				full = a[2:]
			case strings.HasPrefix(a, "s="):
				saltB64 = a[2:]
			case strings.HasPrefix(a, "i="):
				iters, _ = strconv.Atoi(a[2:])
			}
		}
		salt, err := base64.StdEncoding.DecodeString(saltB64)
		require.NoError(t, err)
		salted, err := pbkdf2.Key(sha256.New, pass, salt, iters, sha256.Size)
		require.NoError(t, err)
		hm := func(k []byte, s string) []byte { m := hmac.New(sha256.New, k); m.Write([]byte(s)); return m.Sum(nil) }
		clientKey := hm(salted, "Client Key")
		stored := sha256.Sum256(clientKey)
		c2wop := "c=biws,r=" + nonceOf(cnonce, full)
		sig := hm(stored[:], c1bare+","+string(s1)+","+c2wop)
		for i := range sig {
			sig[i] ^= clientKey[i]
		}
		s2, err := l.Step([]byte(c2wop + ",p=" + base64.StdEncoding.EncodeToString(sig)))
		if err != nil {
			return err
		}
		require.True(t, l.Done())
		serverKey := hm(salted, "Server Key")
		assert.Equal(t, "v="+base64.StdEncoding.EncodeToString(hm(serverKey, c1bare+","+string(s1)+","+c2wop)), string(s2))
		return nil
	}
	assert.NoError(t, exchange(func(_, full string) string { return full }, "pw"), "RFC 5802's form")
	assert.NoError(t, exchange(func(c, full string) string { return c + full }, "pw"), "librdkafka's form")
	assert.ErrorIs(t, exchange(func(c, full string) string { return c + full }, "wrong"), users.ErrAuthentication)
	err := exchange(func(c, _ string) string { return c + "made-up" }, "pw")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nonce")
}

func TestRefusedFirstMessages(t *testing.T) {
	u := users.New(scramcreds.NewMemStore())
	for name, msg := range map[string]string{
		"channel binding":      "p=tls-unique,,n=bob,r=abc",
		"mandatory extension":  "n,,m=x,n=bob,r=abc",
		"delegation token":     "n,,n=bob,r=abc,tokenauth=true",
		"bad name encoding":    "n,,n=b=ob,r=abc",
		"no nonce":             "n,,n=bob",
		"other authz identity": "n,a=alice,n=bob,r=abc",
	} {
		t.Run(name, func(t *testing.T) {
			l, err := u.Start(context.Background(), users.SHA512)
			require.NoError(t, err)
			_, err = l.Step([]byte(msg))
			require.Error(t, err)
			assert.False(t, l.Done())
		})
	}
}

// The exchange parses bytes from the network: no message may panic it or
// log anyone in without the password.
func FuzzLogin(f *testing.F) {
	f.Add([]byte("n,,n=bob,r=abc"), []byte("c=biws,r=abc,p=AAAA"))
	f.Add([]byte("y,a=bob,n=bob,r=x,ext=1"), []byte("c=eSxhPWJvYiw=,r=x,p="))
	f.Add([]byte("n,,n==2C=3D,r=,"), []byte(",p=,p="))
	ctx := context.Background()
	u := users.New(scramcreds.NewMemStore())
	require.NoError(f, u.SetPassword(ctx, "bob", users.SHA256, "pw", 4096))
	f.Fuzz(func(t *testing.T, first, final []byte) {
		l, err := u.Start(ctx, users.SHA256)
		require.NoError(t, err)
		if _, err := l.Step(first); err != nil {
			return
		}
		_, err = l.Step(final)
		assert.False(t, err == nil && l.Done(), "logged in without the password: %q %q", first, final)
	})
}
