package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDelayGrowsToMax(t *testing.T) {
	t.Parallel()
	b := Backoff{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond, Multiplier: 2, Jitter: 0.1}
	for attempt, want := range []time.Duration{10, 20, 40, 80, 80, 80} {
		want *= time.Millisecond
		for range 20 {
			d := b.Delay(attempt)
			assert.GreaterOrEqual(t, d, want*9/10, "attempt %d", attempt)
			assert.LessOrEqual(t, d, want*11/10, "attempt %d", attempt)
		}
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	assert.Equal(t, Backoff{Initial: DefaultInitial, Max: DefaultMax, Multiplier: DefaultMultiplier, Jitter: DefaultJitter},
		Backoff{}.WithDefaults())
	assert.Equal(t, 50*time.Millisecond, Backoff{Initial: 50 * time.Millisecond, Max: time.Millisecond}.WithDefaults().Max,
		"Max is at least Initial")
	d := Backoff{}.Delay(1000)
	assert.GreaterOrEqual(t, d, DefaultMax*8/10)
	assert.LessOrEqual(t, d, DefaultMax*12/10)
	assert.Positive(t, Backoff{}.Delay(-1))
}
