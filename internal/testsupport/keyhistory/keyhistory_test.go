package keyhistory

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// deliver records a delivery got at from, let go at to with a, its outcome o.
func deliver(h *History, key string, off int64, count, from, to int, a Ack, o Outcome) {
	id := h.GotAt("t/0", key, off, count, at(from))
	if to >= 0 {
		h.LetAt(id, a, at(to))
	}
	h.Outcome(id, o)
}

func check(t *testing.T, h *History, produced map[int64]string, wantViolations ...string) Report {
	t.Helper()
	r := h.Check(map[string]map[int64]string{"t/0": produced}, 3)
	if len(r.Violations) != len(wantViolations) {
		t.Fatalf("violations %q, want %d matching %q", r.Violations, len(wantViolations), wantViolations)
	}
	for i, w := range wantViolations {
		if !strings.Contains(r.Violations[i], w) {
			t.Errorf("violation %d %q, want it to say %q", i, r.Violations[i], w)
		}
	}
	return r
}

func TestCleanHistory(t *testing.T) {
	var h History
	deliver(&h, "a", 0, 1, 0, 10, Release, Applied)
	deliver(&h, "b", 1, 1, 1, 5, Accept, Applied) // another key: in parallel
	deliver(&h, "a", 0, 2, 11, 20, Accept, Applied)
	deliver(&h, "a", 2, 1, 21, 30, Reject, Applied)
	deliver(&h, "a", 3, 1, 31, 32, Release, Applied)
	deliver(&h, "a", 3, 2, 33, 34, Release, Applied)
	deliver(&h, "a", 3, 3, 35, 36, Release, Applied) // the limit: archived
	r := check(t, &h, map[int64]string{0: "a", 1: "b", 2: "a", 3: "a"})
	if r.Accepted != 2 || r.Rejected != 1 || r.Archived != 1 || r.Checked != 7 {
		t.Fatalf("report %v", r)
	}
}

func TestOverlapAndOrder(t *testing.T) {
	var h History
	deliver(&h, "a", 0, 1, 0, 10, Accept, Applied)
	deliver(&h, "a", 1, 1, 5, 8, Accept, Applied) // inside 0's lock, and accepted first
	check(t, &h, map[int64]string{0: "a", 1: "a"}, "offset 1 locked", "accepted 0 after 1")
}

func TestAcceptedTwice(t *testing.T) {
	var h History
	deliver(&h, "a", 0, 1, 0, 10, Accept, Applied)
	deliver(&h, "a", 0, 2, 11, 12, Accept, Applied)
	check(t, &h, map[int64]string{0: "a"}, "accepted 0 after 0")
}

// A restart ends the locks of the old server: a refused acknowledgement's
// lock counts until the stop began, no longer.
func TestRestartVoidsLocks(t *testing.T) {
	var h History
	deliver(&h, "a", 0, 1, 0, 50, Accept, Refused) // its session died with the server
	h.StoppingAt(at(20))
	deliver(&h, "a", 0, 2, 30, 40, Accept, Applied) // the new server's lock
	deliver(&h, "b", 1, 1, 25, 60, Accept, Refused) // after the stop began: proves nothing
	deliver(&h, "b", 1, 2, 35, 45, Accept, Applied)
	deliver(&h, "c", 2, 1, 0, 30, Accept, Lost) // its lock expired at some point: proves nothing
	deliver(&h, "c", 2, 2, 10, 15, Accept, Applied)
	r := check(t, &h, map[int64]string{0: "a", 1: "b", 2: "c"})
	if r.Voided != 1 || r.Unproven != 2 || r.Checked != 4 {
		t.Fatalf("report %v", r)
	}

	// Held across the stop's beginning, and a second record of the key
	// before it: a violation.
	var g History
	deliver(&g, "a", 0, 1, 0, 50, Accept, Refused)
	deliver(&g, "a", 1, 1, 10, 15, Accept, Applied)
	g.StoppingAt(at(20))
	check(t, &g, map[int64]string{0: "a", 1: "a"}, "offset 1 locked", "offset 0: delivered 1 times")
}

func TestLossAndKeys(t *testing.T) {
	var h History
	deliver(&h, "a", 0, 1, 0, 1, Release, Applied)
	deliver(&h, "x", 1, 1, 2, 3, Accept, Applied)
	deliver(&h, "a", 9, 1, 4, 5, Accept, Applied)
	check(t, &h, map[int64]string{0: "a", 1: "b", 2: "c"},
		"offset 1: key \"x\", produced \"b\"", "offset 9: delivered, never produced",
		"offset 0: delivered 1 times", "offset 2: never delivered")
}

// An ACCEPT whose outcome never came (its consumer was killed) may have
// settled its record: not a loss, counted apart; a RELEASE would not have.
func TestUncertainSettlement(t *testing.T) {
	var h History
	deliver(&h, "a", 0, 1, 0, 1, Accept, Pending)
	deliver(&h, "b", 1, 1, 2, 3, Release, Unknown)
	r := check(t, &h, map[int64]string{0: "a", 1: "b"}, "offset 1: delivered 1 times")
	if r.Uncertain != 1 || r.Unproven != 2 {
		t.Fatalf("report %v", r)
	}
}
