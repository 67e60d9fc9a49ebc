package jsstate

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	sljs "github.com/sharelog/sharelog/internal/jetstream"
)

type fakeEntry struct {
	key string
	val []byte
	rev uint64
}

func (e fakeEntry) Bucket() string            { return "SL_SHARE" }
func (e fakeEntry) Key() string               { return e.key }
func (e fakeEntry) Value() []byte             { return e.val }
func (e fakeEntry) Revision() uint64          { return e.rev }
func (e fakeEntry) Created() time.Time        { return time.Time{} }
func (e fakeEntry) Delta() uint64             { return 0 }
func (e fakeEntry) Operation() njs.KeyValueOp { return njs.KeyValuePut }

type fakeWatcher struct{ ch chan njs.KeyValueEntry }

func (w fakeWatcher) Updates() <-chan njs.KeyValueEntry { return w.ch }
func (w fakeWatcher) Stop() error                       { return nil }

// A watch that ends before the end of its initial values is not taken for
// the whole bucket: the read starts again with a new watch and returns
// what that one delivers in full.
func TestWatchSnapshotsStartsAgainAfterAnEarlyEnd(t *testing.T) {
	val, err := json.Marshal(groupValue{Epoch: 3})
	require.NoError(t, err)
	g1 := fakeEntry{key: "g." + sljs.HexKey("g1"), val: val, rev: 1}
	g2 := fakeEntry{key: "g." + sljs.HexKey("g2"), val: val, rev: 2}
	opened := 0
	dm, st, err := watchSnapshots(context.Background(), func(context.Context) (njs.KeyWatcher, error) {
		opened++
		ch := make(chan njs.KeyValueEntry, 3)
		ch <- g1
		if opened == 1 {
			close(ch) // ends after g1: g2 never came
		} else {
			ch <- g2
			ch <- nil
		}
		return fakeWatcher{ch}, nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, opened)
	require.Len(t, st.Groups, 2)
	require.Equal(t, uint64(2), dm["g2"].rev)

	// Until ctx ends: then the error says the read was incomplete.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err = watchSnapshots(ctx, func(context.Context) (njs.KeyWatcher, error) {
		ch := make(chan njs.KeyValueEntry)
		close(ch)
		return fakeWatcher{ch}, nil
	})
	require.ErrorIs(t, err, errWatchEnded)
}
