// Package stats holds the small statistics the benchmark report needs:
// percentiles of latency samples and the median and spread of repeated runs.
package stats

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of xs by the
// nearest-rank method: the smallest value such that at least p% of the
// samples are <= it. It returns NaN for no samples. xs is not modified.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 || math.IsNaN(p) {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return percentileSorted(s, p)
}

func percentileSorted(s []float64, p float64) float64 {
	if p <= 0 {
		return s[0]
	}
	if p >= 100 {
		return s[len(s)-1]
	}
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}

// Latencies collects durations and answers percentiles in milliseconds.
type Latencies struct {
	ns []int64
}

// Add records one duration.
func (l *Latencies) Add(d time.Duration) { l.ns = append(l.ns, int64(d)) }

// Merge appends every sample of o.
func (l *Latencies) Merge(o *Latencies) { l.ns = append(l.ns, o.ns...) }

// Len is the number of samples.
func (l *Latencies) Len() int { return len(l.ns) }

// PercentileMs is the p-th percentile in milliseconds (NaN when empty).
func (l *Latencies) PercentileMs(p float64) float64 {
	if len(l.ns) == 0 {
		return math.NaN()
	}
	s := make([]float64, len(l.ns))
	for i, v := range l.ns {
		s[i] = float64(v) / 1e6
	}
	slices.Sort(s)
	return percentileSorted(s, p)
}

// Summary describes repeated measurements of one quantity.
type Summary struct {
	N      int
	Median float64
	Min    float64
	Max    float64
}

// Summarize returns the median (the mean of the middle two for an even
// count), minimum and maximum of xs, ignoring NaNs. N = 0 means no value.
func Summarize(xs []float64) Summary {
	var s []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{N: len(s), Median: m, Min: s[0], Max: s[len(s)-1]}
}

// SpreadPct is (max-min)/median in percent, 0 for a single value.
func (s Summary) SpreadPct() float64 {
	if s.N < 2 || s.Median == 0 {
		return 0
	}
	return (s.Max - s.Min) / math.Abs(s.Median) * 100
}
