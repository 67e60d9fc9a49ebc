package verify

import (
	"strings"
	"sync"
	"testing"
)

func TestTrackerExactlyOnce(t *testing.T) {
	tr := NewTracker(100, 1000)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for o := int64(100 + w); o < 1100; o += 4 {
				if !tr.Deliver(o) {
					t.Errorf("first delivery of %d reported as a repeat", o)
				}
			}
		})
	}
	wg.Wait()
	r := tr.Result()
	if err := r.ExactlyOnce(); err != nil {
		t.Fatal(err)
	}
	if r.Delivered != 1000 {
		t.Fatalf("delivered %d", r.Delivered)
	}
}

func TestTrackerFailsLoudly(t *testing.T) {
	tr := NewTracker(0, 10)
	for o := int64(0); o < 9; o++ { // 9 never delivered
		tr.Deliver(o)
	}
	if tr.Deliver(3) {
		t.Fatal("second delivery reported as first")
	}
	tr.Deliver(10) // out of range
	r := tr.Result()
	if r.Missing != 1 || r.FirstMiss != 9 || r.Duplicates != 1 || r.OutOfRange != 1 {
		t.Fatalf("%+v", r)
	}
	err := r.ExactlyOnce()
	if err == nil || !strings.Contains(err.Error(), "1 of 10 offsets missing") {
		t.Fatalf("err = %v", err)
	}
	if r.AtLeastOnce() == nil {
		t.Fatal("a missing offset violates at-least-once too")
	}
	tr.Deliver(9)
	r = tr.Result()
	r.OutOfRange = 0
	if r.AtLeastOnce() != nil || r.ExactlyOnce() == nil {
		t.Fatalf("duplicates are allowed by at-least-once only: %+v", r)
	}
	if tr.Count(3) != 2 || tr.Count(-1) != 0 {
		t.Fatal("Count")
	}
}

func TestMapHashOrderIndependent(t *testing.T) {
	var a, b MapHash
	keys := []string{"a/1", "b/2", "c/3", "d/4"}
	for i, k := range keys {
		a.Add([]byte(k), int64(i))
	}
	for i := len(keys) - 1; i >= 0; i-- {
		b.Add([]byte(keys[i]), int64(i))
	}
	if !a.Equal(&b) {
		t.Fatal("same set in another order must be equal")
	}
	var c MapHash
	for i, k := range keys {
		off := int64(i)
		if i == 2 {
			off = 7 // same keys, one different offset
		}
		c.Add([]byte(k), off)
	}
	if a.Equal(&c) {
		t.Fatal("a different offset must change the fingerprint")
	}
	var d MapHash
	for i, k := range keys[:3] {
		d.Add([]byte(k), int64(i))
	}
	if a.Equal(&d) {
		t.Fatal("a missing key must change the fingerprint")
	}
}
