package apierr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestErrorAndReasonOf(t *testing.T) {
	e := New(NotOwner, "partition %s-%d lives elsewhere", "t", 3)
	assert.Equal(t, "partition t-3 lives elsewhere", e.Error())
	assert.Equal(t, NotOwner, ReasonOf(fmt.Errorf("forward: %w", e)), "found through wrapping")
	assert.Equal(t, InvalidRequest, ReasonOf(Invalid("bad %q", "x")))
	assert.Equal(t, Reason(""), ReasonOf(errors.New("plain")))
	assert.Equal(t, Reason(""), ReasonOf(nil))
}

func TestReasonsAreDistinct(t *testing.T) {
	seen := map[Reason]bool{}
	for _, r := range Reasons() {
		assert.False(t, seen[r], "%s listed twice", r)
		assert.NotEmpty(t, r)
		seen[r] = true
	}
}

// Every reason has a Kafka code, and the code names the reason back unless
// it is one of the codes several reasons share (documented at kafkaCodes).
func TestKafkaCodes(t *testing.T) {
	shared := map[int16]bool{6: true, 7: true, 1: true}
	for _, r := range Reasons() {
		c, ok := kafkaCodes[r]
		assert.True(t, ok, "%s has no Kafka code", r)
		assert.Equal(t, c, r.KafkaCode())
		if !shared[c] {
			assert.Equal(t, r, ReasonOfKafkaCode(c), "code %d", c)
		}
	}
	assert.Len(t, kafkaCodes, len(Reasons()), "only known reasons")
	assert.Equal(t, int16(-1), Reason("NO_SUCH").KafkaCode())
	assert.Equal(t, NotOwner, ReasonOfKafkaCode(6))
	assert.Equal(t, RequestTimedOut, ReasonOfKafkaCode(7))
	assert.Equal(t, OffsetOutOfRange, ReasonOfKafkaCode(1))
	assert.Equal(t, None, ReasonOfKafkaCode(0))
	assert.Equal(t, int16(0), None.KafkaCode(), "NONE round-trips: a per-partition success")
	assert.Equal(t, Internal, ReasonOfKafkaCode(9999))
}
