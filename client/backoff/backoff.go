// Package backoff is the retry schedule shared by sharelog's Go clients
// (shareconsumer and changestream): exponential growth with a cap and
// random jitter, so that many clients failing at once do not retry in
// step.
package backoff

import (
	"math"
	"math/rand/v2"
	"time"
)

// Defaults of the zero fields of a Backoff.
const (
	DefaultInitial    = 100 * time.Millisecond
	DefaultMax        = 5 * time.Second
	DefaultMultiplier = 2
	DefaultJitter     = 0.2
)

// Backoff is an exponential backoff with jitter. Zero fields take the
// defaults above.
type Backoff struct {
	// Initial is the first delay.
	Initial time.Duration
	// Max caps the delay before jitter.
	Max time.Duration
	// Multiplier grows the delay after each failure (values below 1 take
	// the default).
	Multiplier float64
	// Jitter randomises each delay by ± this fraction, in (0, 1].
	Jitter float64
}

// WithDefaults returns b with its zero (or out of range) fields set.
func (b Backoff) WithDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultMax
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.Multiplier < 1 {
		b.Multiplier = DefaultMultiplier
	}
	if b.Jitter <= 0 || b.Jitter > 1 {
		b.Jitter = DefaultJitter
	}
	return b
}

// Delay is the wait before retry number attempt (0 = the first retry):
// min(Max, Initial·Multiplier^attempt), randomised by ± Jitter.
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.WithDefaults()
	d := float64(b.Initial) * math.Pow(b.Multiplier, float64(min(max(attempt, 0), 64)))
	d = min(d, float64(b.Max))
	d *= 1 + b.Jitter*(2*rand.Float64()-1)
	return time.Duration(d)
}
