package shareconsumer

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func TestRangesOf(t *testing.T) {
	t.Parallel()
	m := map[int64]AckType{}
	for off := int64(100); off < 10100; off++ {
		m[off] = Accept
	}
	m[5000] = Release
	m[10200] = Accept
	m[7] = Reject
	m[8] = Reject
	require.Equal(t, []AckRange{
		{FirstOffset: 7, LastOffset: 8, Type: Reject},
		{FirstOffset: 100, LastOffset: 4999, Type: Accept},
		{FirstOffset: 5000, LastOffset: 5000, Type: Release},
		{FirstOffset: 5001, LastOffset: 10099, Type: Accept},
		{FirstOffset: 10200, LastOffset: 10200, Type: Accept},
	}, rangesOf(m))
	require.Empty(t, rangesOf(nil))

	b := batchesOf(rangesOf(map[int64]AckType{3: Renew, 4: Renew}))
	require.Len(t, b, 1)
	require.Equal(t, []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RENEW}, b[0].GetAcknowledgeTypes())
	require.EqualValues(t, 3, b[0].GetFirstOffset())
	require.EqualValues(t, 4, b[0].GetLastOffset())

	c, u := split(map[int64]AckType{1: Accept, 2: Accept, 3: Accept}, map[int64]AckType{2: Accept})
	require.Equal(t, []AckRange{{1, 1, Accept}, {3, 3, Accept}}, c)
	require.Equal(t, []AckRange{{2, 2, Accept}}, u)
}

func TestEpochSequence(t *testing.T) {
	t.Parallel()
	s := newSession()
	s.advance()
	require.EqualValues(t, 1, s.epoch)
	s.epoch = math.MaxInt32 - 1
	s.advance()
	require.EqualValues(t, math.MaxInt32, s.epoch)
	s.advance()
	require.EqualValues(t, 1, s.epoch, "2147483647 is followed by 1")
}

func TestParseAckType(t *testing.T) {
	t.Parallel()
	for _, at := range []AckType{Accept, Release, Reject, Renew} {
		got, err := ParseAckType(at.String())
		require.NoError(t, err)
		require.Equal(t, at, got)
	}
	_, err := ParseAckType("gap")
	require.Error(t, err)
}

func TestNewUUID(t *testing.T) {
	t.Parallel()
	id := newUUID()
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id)
	require.NotEqual(t, id, newUUID())
}
