package main

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// A history of one partition's operations as clients saw them (call and
// return times, inputs and outputs), checked with porcupine against the
// sequential model of a partition: produce appends and answers its offset,
// fetch answers the records from an offset, purge raises the log start.
type history struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func newHistory() *history { return &history{start: time.Now()} }

type opKind int

const (
	opProduce opKind = iota
	opFetch
	opPurge
)

type partIn struct {
	kind   opKind
	value  string // produce
	offset int64  // fetch, purge
}

type partOut struct {
	unknown    bool     // the call failed: it may or may not have happened
	outOfRange bool     // fetch, purge: refused as out of range
	offset     int64    // produce: the record's offset
	values     []string // fetch: the records' values
	lowWater   int64    // purge: the log start after it
}

// partState is the model's state: the values at offsets [0, len) and the
// log start.
type partState struct {
	vals  []string
	start int64
}

var partitionModel = porcupine.Model{
	Init: func() any { return partState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(partState), input.(partIn), output.(partOut)
		end := int64(len(s.vals))
		switch in.kind {
		case opProduce:
			if !out.unknown && out.offset != end {
				return false, s
			}
			return true, partState{vals: append(slices.Clip(s.vals), in.value), start: s.start}
		case opFetch:
			if out.unknown {
				return true, s
			}
			if out.outOfRange {
				return in.offset < s.start || in.offset > end, s
			}
			if in.offset < s.start || in.offset+int64(len(out.values)) > end {
				return false, s
			}
			if len(out.values) == 0 && in.offset < end {
				return false, s // records were there: a fetch returns at least one
			}
			return slices.Equal(out.values, s.vals[in.offset:in.offset+int64(len(out.values))]), s
		default: // opPurge
			if out.unknown {
				if in.offset > end {
					return true, s
				}
				return true, partState{vals: s.vals, start: max(s.start, in.offset)}
			}
			if out.outOfRange {
				return in.offset > end, s
			}
			if in.offset > end || out.lowWater != max(s.start, in.offset) {
				return false, s
			}
			return true, partState{vals: s.vals, start: out.lowWater}
		}
	},
	Equal: func(a, b any) bool {
		x, y := a.(partState), b.(partState)
		return x.start == y.start && slices.Equal(x.vals, y.vals)
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(partIn), output.(partOut)
		return fmt.Sprintf("%v → %+v", in, out)
	},
}

// call records one operation: fn runs it and returns its output.
func (h *history) call(client int, in partIn, fn func() partOut) partOut {
	call := time.Since(h.start).Nanoseconds()
	out := fn()
	ret := time.Since(h.start).Nanoseconds()
	if out.unknown {
		if in.kind == opFetch {
			return out // a failed read changes nothing and shows nothing
		}
		ret = math.MaxInt64 // may take effect at any time after the call
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
	return out
}

// resolve settles produces of unknown outcome with the final content of
// the partition (value → offset, read after the run; nothing purged): a
// value found there was appended at that offset, at some time after its
// call; a value not found never was (when nothing was purged, logStart 0),
// so the operation is dropped.
func (h *history) resolve(final map[string]int64, logStart int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := h.ops[:0]
	for _, op := range h.ops {
		in, out := op.Input.(partIn), op.Output.(partOut)
		if in.kind == opProduce && out.unknown {
			off, ok := final[in.value]
			switch {
			case ok:
				op.Output = partOut{offset: off}
			case logStart == 0:
				continue
			}
		}
		kept = append(kept, op)
	}
	h.ops = kept
}

// check fails t if the history is not linearizable.
func (h *history) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.mu.Unlock()
	res := porcupine.CheckOperationsTimeout(partitionModel, ops, 20*time.Second)
	switch res {
	case porcupine.Ok:
		t.Logf("history of %d operations is linearizable", len(ops))
	case porcupine.Unknown:
		t.Logf("linearizability check of %d operations timed out (inconclusive)", len(ops))
	default:
		t.Fatalf("history of %d operations is not linearizable", len(ops))
	}
}

func TestPartitionModelRejectsLostWrite(t *testing.T) {
	h := newHistory()
	h.call(0, partIn{kind: opProduce, value: "a"}, func() partOut { return partOut{offset: 0} })
	h.call(0, partIn{kind: opProduce, value: "b"}, func() partOut { return partOut{offset: 1} })
	// A read after both acknowledgements that misses b: a lost write.
	h.call(1, partIn{kind: opFetch, offset: 0}, func() partOut { return partOut{values: []string{"a"}} })
	h.call(1, partIn{kind: opFetch, offset: 1}, func() partOut { return partOut{values: nil} })
	h.call(0, partIn{kind: opProduce, value: "c"}, func() partOut { return partOut{offset: 1} })
	require := porcupine.CheckOperations(partitionModel, h.ops)
	if require {
		t.Fatal("a second record at offset 1 was accepted by the model")
	}
	h2 := newHistory()
	h2.call(0, partIn{kind: opProduce, value: "a"}, func() partOut { return partOut{offset: 0} })
	h2.call(0, partIn{kind: opPurge, offset: 1}, func() partOut { return partOut{lowWater: 1} })
	h2.call(1, partIn{kind: opFetch, offset: 0}, func() partOut { return partOut{values: []string{"a"}} })
	if porcupine.CheckOperations(partitionModel, h2.ops) {
		t.Fatal("a read below an acknowledged purge was accepted by the model")
	}
	h3 := newHistory()
	h3.call(0, partIn{kind: opProduce, value: "a"}, func() partOut { return partOut{unknown: true} })
	h3.call(0, partIn{kind: opProduce, value: "b"}, func() partOut { return partOut{offset: 0} })
	h3.call(1, partIn{kind: opFetch, offset: 0}, func() partOut { return partOut{values: []string{"b"}} })
	if !porcupine.CheckOperations(partitionModel, h3.ops) {
		t.Fatal("an unknown-outcome produce that never happened was refused")
	}
}
