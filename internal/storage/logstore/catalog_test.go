package logstore_test

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// fakeTopic is a store's topic as the catalog sees it.
type fakeTopic struct{ info logstore.TopicInfo }

func (t *fakeTopic) Info() logstore.TopicInfo { return t.info }

func newCatalog() *logstore.Catalog[*fakeTopic] { return logstore.NewCatalog[*fakeTopic]() }

// create reserves name and installs its topic, as the file and memory
// stores do.
func create(t *testing.T, c *logstore.Catalog[*fakeTopic], name string, partitions int32) *fakeTopic {
	t.Helper()
	info, err := c.Reserve(name, partitions, logstore.TopicConfig{})
	require.NoError(t, err)
	ft := &fakeTopic{info: info}
	require.NoError(t, c.Install(ft))
	return ft
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestCatalogCreateValidatesAndNormalizes(t *testing.T) {
	c := newCatalog()
	for _, tc := range []struct {
		name       string
		topic      string
		partitions int32
		cfg        logstore.TopicConfig
	}{
		{"empty name", "", 1, logstore.TopicConfig{}},
		{"reserved prefix", "__x", 1, logstore.TopicConfig{}},
		{"bad character", "a/b", 1, logstore.TopicConfig{}},
		{"dot", ".", 1, logstore.TopicConfig{}},
		{"no partitions", "t", 0, logstore.TopicConfig{}},
		{"too many partitions", "t", logstore.MaxPartitions + 1, logstore.TopicConfig{}},
		{"tiny segments", "t", 1, logstore.TopicConfig{SegmentBytes: 1}},
		{"bad cleanup policy", "t", 1, logstore.TopicConfig{CleanupPolicy: "sometimes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Prepare(tc.topic, tc.partitions, tc.cfg)
			assert.ErrorIs(t, err, logstore.ErrInvalidArgument)
			_, err = c.Reserve(tc.topic, tc.partitions, tc.cfg)
			assert.ErrorIs(t, err, logstore.ErrInvalidArgument)
		})
	}
	// A refused request reserves nothing.
	create(t, c, "t", 1)

	info, err := c.Prepare("u", 3, logstore.TopicConfig{})
	require.NoError(t, err)
	assert.Equal(t, "u", info.Name)
	assert.Equal(t, int32(3), info.Partitions)
	assert.Equal(t, int64(logstore.DefaultSegmentBytes), info.Config.SegmentBytes)
	assert.Equal(t, logstore.CleanupDelete, info.Config.CleanupPolicy)
	assert.Regexp(t, uuidV4, info.ID)
	again, err := c.Prepare("u", 3, logstore.TopicConfig{})
	require.NoError(t, err, "Prepare reserves nothing")
	assert.NotEqual(t, info.ID, again.ID, "every create gets a new topic ID")
}

func TestCatalogNameTakenOnce(t *testing.T) {
	c := newCatalog()
	create(t, c, "t", 1)
	_, err := c.Prepare("t", 1, logstore.TopicConfig{})
	assert.ErrorIs(t, err, logstore.ErrTopicExists)
	_, err = c.Reserve("t", 1, logstore.TopicConfig{})
	assert.ErrorIs(t, err, logstore.ErrTopicExists)

	// A reservation holds the name until Install or Release.
	info, err := c.Reserve("r", 1, logstore.TopicConfig{})
	require.NoError(t, err)
	_, err = c.Prepare("r", 1, logstore.TopicConfig{})
	assert.ErrorIs(t, err, logstore.ErrTopicExists)
	_, err = c.Reserve("r", 1, logstore.TopicConfig{})
	assert.ErrorIs(t, err, logstore.ErrTopicExists)
	_, err = c.Lookup("r")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic, "a reserved name is no topic yet")
	c.Release("r")
	_, err = c.Reserve("r", 1, logstore.TopicConfig{})
	require.NoError(t, err, "released")
	require.NoError(t, c.Install(&fakeTopic{info: info}))

	// Install without a reservation (Prepare) does not replace a topic.
	p, err := c.Prepare("p", 1, logstore.TopicConfig{})
	require.NoError(t, err)
	create(t, c, "p", 1)
	assert.ErrorIs(t, c.Install(&fakeTopic{info: p}), logstore.ErrTopicExists)
}

func TestCatalogConcurrentCreatesOneWins(t *testing.T) {
	c := newCatalog()
	const n = 16
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for range n {
		wg.Go(func() {
			info, err := c.Reserve("t", 1, logstore.TopicConfig{})
			if err != nil {
				assert.ErrorIs(t, err, logstore.ErrTopicExists)
				return
			}
			assert.NoError(t, c.Install(&fakeTopic{info: info}))
			mu.Lock()
			wins++
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, 1, wins)
}

func TestCatalogLookups(t *testing.T) {
	c := newCatalog()
	b := create(t, c, "b", 2)
	a := create(t, c, "a", 1)

	got, err := c.Lookup("b")
	require.NoError(t, err)
	assert.Same(t, b, got)
	_, err = c.Lookup("nope")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	assert.EqualError(t, err, `topic "nope": `+logstore.ErrUnknownTopic.Error())

	for _, part := range []int32{0, 1} {
		got, err := c.LookupPartition("b", part)
		require.NoError(t, err)
		assert.Same(t, b, got)
	}
	for _, part := range []int32{-1, 2} {
		_, err := c.LookupPartition("b", part)
		assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
		assert.EqualError(t, err, fmt.Sprintf("topic %q has 2 partitions, no partition %d: %v", "b", part, logstore.ErrUnknownTopic))
	}
	_, err = c.LookupPartition("nope", 0)
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)

	id, err := c.TopicID("a")
	require.NoError(t, err)
	assert.Equal(t, a.info.ID, id)
	_, err = c.TopicID("nope")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)

	infos, err := c.Infos()
	require.NoError(t, err)
	assert.Equal(t, []logstore.TopicInfo{a.info, b.info}, infos, "sorted by name")
	assert.ElementsMatch(t, []*fakeTopic{a, b}, c.All())
}

func TestCatalogRemove(t *testing.T) {
	c := newCatalog()
	old := create(t, c, "t", 1)
	_, err := c.Remove("nope")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	got, err := c.Remove("t")
	require.NoError(t, err)
	assert.Same(t, old, got)
	_, err = c.Lookup("t")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	_, err = c.Remove("t")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)

	// The name is free again, for a new topic under a new ID.
	cur := create(t, c, "t", 1)
	assert.NotEqual(t, old.info.ID, cur.info.ID)
	c.RemoveIf("t", old) // a stale lookup's topic: the new one stays
	got, err = c.Lookup("t")
	require.NoError(t, err)
	assert.Same(t, cur, got)
	c.RemoveIf("t", cur)
	_, err = c.Lookup("t")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)

	err = logstore.TopicDeletedError("t")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	assert.EqualError(t, err, `topic "t" was deleted: `+logstore.ErrUnknownTopic.Error())
}

func TestCatalogUpdateInRevisionOrder(t *testing.T) {
	c := newCatalog()
	info, err := c.Prepare("t", 1, logstore.TopicConfig{})
	require.NoError(t, err)
	v1 := &fakeTopic{info: info}
	put := func(nt *fakeTopic) func(*fakeTopic) *fakeTopic {
		return func(*fakeTopic) *fakeTopic { return nt }
	}

	gone, applied := c.Update("t", 5, put(v1))
	assert.True(t, applied)
	assert.Nil(t, gone)
	got, err := c.Lookup("t")
	require.NoError(t, err)
	assert.Same(t, v1, got)

	// A change at that revision or an older one was seen already.
	for _, rev := range []uint64{5, 4} {
		gone, applied = c.Update("t", rev, func(*fakeTopic) *fakeTopic {
			t.Fatal("next called for a stale revision")
			return nil
		})
		assert.False(t, applied)
		assert.Nil(t, gone)
	}

	// next sees the current topic; returning it changes nothing but the
	// revision applied.
	gone, applied = c.Update("t", 6, func(cur *fakeTopic) *fakeTopic {
		assert.Same(t, v1, cur)
		return cur
	})
	assert.True(t, applied)
	assert.Nil(t, gone)
	_, applied = c.Update("t", 6, put(nil))
	assert.False(t, applied)

	v2 := &fakeTopic{info: info}
	gone, applied = c.Update("t", 7, put(v2))
	assert.True(t, applied)
	assert.Same(t, v1, gone, "the replaced topic is the caller's to shut down")

	gone, applied = c.Update("t", 8, put(nil))
	assert.True(t, applied)
	assert.Same(t, v2, gone)
	_, err = c.Lookup("t")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)

	// Revisions are per name.
	_, applied = c.Update("u", 1, func(cur *fakeTopic) *fakeTopic {
		assert.Nil(t, cur)
		return nil
	})
	assert.True(t, applied)
}

func TestCatalogAdd(t *testing.T) {
	c := newCatalog()
	a := &fakeTopic{info: logstore.TopicInfo{Name: "a", ID: "id-1", Partitions: 1}}
	require.NoError(t, c.Add(a))
	err := c.Add(&fakeTopic{info: logstore.TopicInfo{Name: "a", ID: "id-2", Partitions: 1}})
	assert.EqualError(t, err, `topic "a" is stored twice, with ids id-1 and id-2`)
	got, err := c.Lookup("a")
	require.NoError(t, err)
	assert.Same(t, a, got)
}

func TestCatalogClose(t *testing.T) {
	c := newCatalog()
	a := create(t, c, "a", 1)
	info, err := c.Reserve("r", 1, logstore.TopicConfig{})
	require.NoError(t, err)

	topics, first := c.Close()
	assert.True(t, first)
	assert.Equal(t, []*fakeTopic{a}, topics)
	topics, first = c.Close()
	assert.False(t, first)
	assert.Nil(t, topics)

	// A create under way when the catalog closed is not installed.
	assert.ErrorIs(t, c.Install(&fakeTopic{info: info}), logstore.ErrClosed)

	for name, err := range map[string]error{
		"Prepare": func() error { _, err := c.Prepare("b", 1, logstore.TopicConfig{}); return err }(),
		"Reserve": func() error { _, err := c.Reserve("b", 1, logstore.TopicConfig{}); return err }(),
		"Lookup":  func() error { _, err := c.Lookup("a"); return err }(),
		"LookupPartition": func() error {
			_, err := c.LookupPartition("a", 0)
			return err
		}(),
		"TopicID": func() error { _, err := c.TopicID("a"); return err }(),
		"Infos":   func() error { _, err := c.Infos(); return err }(),
		"Remove":  func() error { _, err := c.Remove("a"); return err }(),
	} {
		assert.True(t, errors.Is(err, logstore.ErrClosed), "%s: %v", name, err)
	}
	_, applied := c.Update("a", 100, func(*fakeTopic) *fakeTopic { return nil })
	assert.False(t, applied)
	// A validation error still comes first, as before the close.
	_, err = c.Prepare("", 1, logstore.TopicConfig{})
	assert.ErrorIs(t, err, logstore.ErrInvalidArgument)
	// The store's background tasks still see the topics.
	assert.Equal(t, []*fakeTopic{a}, c.All())
}
