package router

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Golden vectors from Kafka's UtilsTest.testMurmur2 (the server's
// internal/broker test holds the same): the client must pick the
// partition the server and a Kafka producer pick.
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
		assert.Equal(t, tc.want, murmur2([]byte(tc.key)), tc.key)
	}
	assert.EqualValues(t, 1357151166%7, Partition([]byte("foobar"), 7))
}
