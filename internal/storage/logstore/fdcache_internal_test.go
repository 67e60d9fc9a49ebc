package logstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openTemp opens a new file for a cache slot.
func openTemp(t *testing.T, c *fdCache, sl *fdSlot, name string, pinned bool) {
	t.Helper()
	c.reserve()
	f, err := os.Create(filepath.Join(t.TempDir(), name))
	require.NoError(t, err)
	c.add(sl, f, pinned)
}

// A full cache evicts the least recently used idle file; a pinned file is
// never closed; with every file pinned, an opener waits for a pin to end
// and, if none does within maxSlotWait, opens beyond the bound.
func TestFDCacheEvictsIdleOnly(t *testing.T) {
	c := newFDCache(2)
	var a, b, x fdSlot
	openTemp(t, c, &a, "a", false)
	openTemp(t, c, &b, "b", true) // b pinned
	require.NotNil(t, c.pin(&a))  // a most recently used, then idle again
	c.unpin(&a)

	openTemp(t, c, &x, "x", false)
	assert.Nil(t, a.f, "the idle file is closed")
	assert.NotNil(t, b.f, "the pinned file stays open")
	fb := b.f
	_, err := fb.Stat()
	require.NoError(t, err, "its descriptor is valid")
	open, _, ev, _, _ := c.stats()
	assert.Equal(t, 2, open)
	assert.Equal(t, int64(1), ev)

	// Pin x too: both pinned. The next opener waits until b is unpinned.
	require.NotNil(t, c.pin(&x))
	got := make(chan struct{})
	go func() {
		c.reserve()
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("reserve did not wait with every file pinned")
	case <-time.After(50 * time.Millisecond):
	}
	c.unpin(&b)
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("reserve did not proceed after an unpin")
	}
	assert.Nil(t, b.f, "b, idle now, made room")
	c.unreserve()

	// x pinned and the bound is 2: one more pinned file fits, then an
	// opener waits maxSlotWait and overflows.
	var y fdSlot
	openTemp(t, c, &y, "y", true)
	start := time.Now()
	var z fdSlot
	openTemp(t, c, &z, "z", true)
	assert.GreaterOrEqual(t, time.Since(start), maxSlotWait)
	open, _, _, _, over := c.stats()
	assert.Equal(t, 3, open)
	assert.Equal(t, int64(1), over)
	// Unpinning brings the cache back within its bound.
	c.unpin(&z)
	open, _, _, _, _ = c.stats()
	assert.Equal(t, 2, open)
	for _, sl := range []*fdSlot{&x, &y, &z} {
		if f := c.remove(sl); f != nil {
			f.Close()
		}
	}
}
