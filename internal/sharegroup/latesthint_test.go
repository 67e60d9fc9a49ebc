package sharegroup

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer safe for the manager's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestLatestOverRecordsHint: a new group starting at latest over partitions that already
// hold records logs one INFO line for the group (issue 34: a first consumer otherwise waits
// with nothing to show and no clue why); earliest, or an empty log, logs nothing.
func TestLatestOverRecordsHint(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, func(o *testOpts) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	e.topic("orders", 2)
	e.topic("empty", 1)
	e.produce("orders", 0, 3, 8)
	e.produce("orders", 1, 2, 8)
	const msg = "share group starts at the latest offset"

	fetchAll := func(group string, parts ...TopicPartition) {
		t.Helper()
		_, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: group, MemberID: "m-" + group, Epoch: 0, Partitions: entries(parts...)})
		require.NoError(t, err)
	}

	fetchAll("empty-log", tp("empty", 0))
	assert.NotContains(t, logs.String(), msg, "nothing skipped on an empty partition")

	_, err := e.m.UpdateConfig(context.Background(), "from-start", GroupConfig{AutoOffsetReset: str("earliest")})
	require.NoError(t, err)
	fetchAll("from-start", tp("orders", 0), tp("orders", 1))
	assert.NotContains(t, logs.String(), msg, "earliest skips nothing")

	fetchAll("new", tp("orders", 0), tp("orders", 1))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var hints []string
	for _, l := range lines {
		if strings.Contains(l, msg) {
			hints = append(hints, l)
		}
	}
	require.Len(t, hints, 1, "once per group, not per partition: %s", logs.String())
	assert.Contains(t, hints[0], "level=INFO")
	assert.Contains(t, hints[0], "group=new")
	assert.Contains(t, hints[0], "topic=orders")
	assert.Regexp(t, `skipped_records=[23]`, hints[0])
}
