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
