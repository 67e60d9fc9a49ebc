package partitioner

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Golden vectors from Kafka's UtilsTest.testMurmur2: keyed records must land
// on the partition a Kafka producer would choose.
func TestMurmur2MatchesKafka(t *testing.T) {
	cases := []struct {
		key  string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
		{"", 275646681},
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			assert.Equal(t, tc.want, Murmur2([]byte(tc.key)))
		})
	}
	assert.EqualValues(t, 1357151166, toPositive(-790332482))
}

func TestForKey(t *testing.T) {
	// Kafka's DefaultPartitioner: toPositive(murmur2(key)) % n.
	assert.EqualValues(t, 1357151166%7, ForKey([]byte("foobar"), 7))
	for n := int32(1); n <= 64; n++ {
		p := ForKey([]byte("k"), n)
		assert.True(t, p >= 0 && p < n)
	}
}
