package stats

import (
	"math"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	cases := map[float64]float64{50: 5, 90: 9, 99: 10, 100: 10, 10: 1, 0: 1, 11: 2}
	for p, want := range cases {
		if got := Percentile(xs, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if xs[0] != 5 {
		t.Fatal("Percentile must not sort its input")
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Fatal("empty input must give NaN")
	}
}

func TestLatencies(t *testing.T) {
	var l Latencies
	for i := 1; i <= 100; i++ {
		l.Add(time.Duration(i) * time.Millisecond)
	}
	if got := l.PercentileMs(50); got != 50 {
		t.Fatalf("p50 = %v", got)
	}
	if got := l.PercentileMs(99); got != 99 {
		t.Fatalf("p99 = %v", got)
	}
	var m Latencies
	m.Add(time.Second)
	l.Merge(&m)
	if l.Len() != 101 || l.PercentileMs(100) != 1000 {
		t.Fatalf("merge: len %d max %v", l.Len(), l.PercentileMs(100))
	}
	var empty Latencies
	if !math.IsNaN(empty.PercentileMs(50)) {
		t.Fatal("empty latencies must give NaN")
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{3, 1, 2})
	if s.N != 3 || s.Median != 2 || s.Min != 1 || s.Max != 3 {
		t.Fatalf("%+v", s)
	}
	s = Summarize([]float64{4, 2, math.NaN()})
	if s.N != 2 || s.Median != 3 {
		t.Fatalf("even count / NaN: %+v", s)
	}
	if got := s.SpreadPct(); math.Abs(got-66.666) > 0.01 {
		t.Fatalf("spread %v", got)
	}
	if s := Summarize(nil); s.N != 0 || !math.IsNaN(s.Median) {
		t.Fatalf("empty: %+v", s)
	}
	if s := Summarize([]float64{7}); s.SpreadPct() != 0 {
		t.Fatal("single value has no spread")
	}
}
