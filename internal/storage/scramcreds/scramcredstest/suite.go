// Package scramcredstest is the conformance suite every scramcreds.Store
// passes (the file store and the JetStream KV store).
package scramcredstest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/scramcreds"
)

// Factory opens the store under test. reopen opens the same durable store
// again (a restart), so the suite can check what survives.
type Factory func(t *testing.T) (s scramcreds.Store, reopen func() scramcreds.Store)

// Cred is a well-formed credential whose keys are filled with b.
func Cred(user, mech string, b byte) scramcreds.Credential {
	size := 32
	if mech == scramcreds.SHA512 {
		size = 64
	}
	return scramcreds.Credential{User: user, Mechanism: mech, Salt: []byte{b, b, b, b}, Iterations: 4096 + int(b),
		StoredKey: bytes.Repeat([]byte{b}, size), ServerKey: bytes.Repeat([]byte{b + 1}, size)}
}

// Run runs the suite.
func Run(t *testing.T, open Factory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"PutGetReplace", testPutGet},
		{"DeleteAndMissing", testDelete},
		{"ListSorted", testList},
		{"SurvivesReopen", testReopen},
		{"OddUserNames", testOddNames},
		{"Concurrent", testConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
}

func testPutGet(t *testing.T, open Factory) {
	ctx := context.Background()
	s, _ := open(t)
	_, ok, err := s.Get(ctx, "alice", scramcreds.SHA256)
	require.NoError(t, err)
	assert.False(t, ok, "a new store has no credential")
	c := Cred("alice", scramcreds.SHA256, 1)
	require.NoError(t, s.Put(ctx, c))
	got, ok, err := s.Get(ctx, "alice", scramcreds.SHA256)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, c, got)
	_, ok, err = s.Get(ctx, "alice", scramcreds.SHA512)
	require.NoError(t, err)
	assert.False(t, ok, "credentials are per mechanism")
	c2 := Cred("alice", scramcreds.SHA256, 7)
	require.NoError(t, s.Put(ctx, c2))
	got, _, err = s.Get(ctx, "alice", scramcreds.SHA256)
	require.NoError(t, err)
	assert.Equal(t, c2, got, "Put replaces")
}

func testDelete(t *testing.T, open Factory) {
	ctx := context.Background()
	s, _ := open(t)
	found, err := s.Delete(ctx, "bob", scramcreds.SHA512)
	require.NoError(t, err)
	assert.False(t, found)
	require.NoError(t, s.Put(ctx, Cred("bob", scramcreds.SHA512, 2)))
	require.NoError(t, s.Put(ctx, Cred("bob", scramcreds.SHA256, 3)))
	found, err = s.Delete(ctx, "bob", scramcreds.SHA512)
	require.NoError(t, err)
	assert.True(t, found)
	_, ok, err := s.Get(ctx, "bob", scramcreds.SHA512)
	require.NoError(t, err)
	assert.False(t, ok)
	_, ok, err = s.Get(ctx, "bob", scramcreds.SHA256)
	require.NoError(t, err)
	assert.True(t, ok, "the other mechanism stays")
}

func testList(t *testing.T, open Factory) {
	ctx := context.Background()
	s, _ := open(t)
	cs, err := s.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, cs)
	want := []scramcreds.Credential{Cred("a", scramcreds.SHA256, 1), Cred("a", scramcreds.SHA512, 2), Cred("b", scramcreds.SHA256, 3)}
	for _, i := range []int{2, 1, 0} {
		require.NoError(t, s.Put(ctx, want[i]))
	}
	cs, err = s.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, cs)
}

func testReopen(t *testing.T, open Factory) {
	ctx := context.Background()
	s, reopen := open(t)
	require.NoError(t, s.Put(ctx, Cred("carol", scramcreds.SHA256, 4)))
	require.NoError(t, s.Put(ctx, Cred("dave", scramcreds.SHA512, 5)))
	_, err := s.Delete(ctx, "dave", scramcreds.SHA512)
	require.NoError(t, err)
	r := reopen()
	cs, err := r.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, []scramcreds.Credential{Cred("carol", scramcreds.SHA256, 4)}, cs)
}

func testOddNames(t *testing.T, open Factory) {
	ctx := context.Background()
	s, reopen := open(t)
	names := []string{"with space", "a.b", "a..b", "ünï", "x*>", "User:nested", "=2C,"}
	for i, n := range names {
		require.NoError(t, s.Put(ctx, Cred(n, scramcreds.SHA256, byte(i))), n)
	}
	r := reopen()
	for i, n := range names {
		got, ok, err := r.Get(ctx, n, scramcreds.SHA256)
		require.NoError(t, err)
		require.True(t, ok, n)
		assert.Equal(t, Cred(n, scramcreds.SHA256, byte(i)), got)
	}
	cs, err := r.List(ctx)
	require.NoError(t, err)
	assert.Len(t, cs, len(names))
}

func testConcurrent(t *testing.T, open Factory) {
	ctx := context.Background()
	s, _ := open(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			assert.NoError(t, s.Put(ctx, Cred(fmt.Sprintf("u%d", i), scramcreds.SHA512, byte(i))))
		})
	}
	wg.Wait()
	cs, err := s.List(ctx)
	require.NoError(t, err)
	assert.Len(t, cs, 8)
}
