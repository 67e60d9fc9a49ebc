package sessioncache

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/principal"
)

// A client inventing member ids cannot grow the binding table: every
// binding goes with the last session or member of its key, whether the
// session is closed, replaced or evicted when idle, or the member leaves.
func TestBindingsAreFreed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newCache(t, 1000, 10*time.Second)
		mallory := principal.WithUser(context.Background(), "User:mallory")
		for i := range 500 {
			s, err := c.Open(mallory, key("m"+strconv.Itoa(i)), 0, nil)
			require.NoError(t, err)
			c.Done(s)
		}
		s, err := c.Open(mallory, key("m0"), 0, nil) // replaced
		require.NoError(t, err)
		c.Done(s)
		c.End(s, EndClosed) // closed
		require.True(t, c.BindMember(key("member"), "User:mallory"))
		c.UnbindMember(key("member")) // left, no session
		time.Sleep(11 * time.Second)  // the rest evicted when idle
		synctest.Wait()
		c.mu.Lock()
		defer c.mu.Unlock()
		assert.Empty(t, c.m)
		assert.Empty(t, c.bound, "no binding outlives its sessions and members")
		assert.Empty(t, c.owned)
	})
}
