package sharegroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// genFile is one state-log file.
type genFile struct {
	gen  uint64
	name string
}

// listGenerations returns the state-log files in dir, oldest first.
func listGenerations(dir string) ([]genFile, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var fs []genFile
	for _, de := range des {
		name := de.Name()
		num, ok := strings.CutPrefix(name, "state-")
		if !ok {
			continue
		}
		num, ok = strings.CutSuffix(num, ".log")
		if !ok {
			continue
		}
		gen, err := strconv.ParseUint(num, 10, 64)
		if err != nil || gen == 0 {
			continue
		}
		fs = append(fs, genFile{gen: gen, name: name})
	}
	slices.SortFunc(fs, func(a, b genFile) int {
		switch {
		case a.gen < b.gen:
			return -1
		case a.gen > b.gen:
			return 1
		}
		return 0
	})
	return fs, nil
}

// recovered is the durable state read back at Open.
type recovered struct {
	lastGen uint64
	groups  []*recGroup // sorted by id
}

type recGroup struct {
	id     string
	config GroupConfig
	epoch  int32
	parts  []*sharePartition // replay-only objects: status, spso, speo, runs
}

// CorruptError is a checksum or format failure in the state log other than
// a torn last entry: Open refuses to start rather than guess (§7).
type CorruptError struct {
	File   string
	Offset int64
	Entry  string // the group and share-partition, if the key is intact
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("share state log %s at offset %d: %s: %v; refusing to start", e.File, e.Offset, e.Entry, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// recoverDir reads the state log: from the newest file holding its
// snapshot marker through the newest file, in order.
func recoverDir(dir string) (*recovered, error) {
	files, err := listGenerations(dir)
	if err != nil {
		return nil, err
	}
	rec := &recovered{}
	if len(files) == 0 {
		return rec, nil
	}
	rec.lastGen = files[len(files)-1].gen
	// Parse from the newest file back to the newest one with a marker
	// (older files are superseded and not read), then replay forwards.
	var parsed [][]entry
	for i := len(files) - 1; i >= 0; i-- {
		es, marker, err := parseFile(dir, files[i], i == len(files)-1)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, es)
		if marker {
			break
		}
	}
	slices.Reverse(parsed)
	r := newReplay()
	for _, es := range parsed {
		for i := range es {
			r.apply(&es[i])
		}
	}
	rec.groups = r.finish()
	return rec, nil
}

// parseFile decodes one file. In the newest file a torn tail — a frame cut
// short, or a bad last frame, or zeros to the end — is where the log ends;
// anything else that fails its checksum is corruption.
func parseFile(dir string, f genFile, newest bool) ([]entry, bool, error) {
	path := filepath.Join(dir, f.name)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	corrupt := func(off int, entry string, err error) error {
		return &CorruptError{File: path, Offset: int64(off), Entry: entry, Err: err}
	}
	if len(data) < len(fileMagic) {
		if newest && bytes.Equal(data, []byte(fileMagic)[:len(data)]) {
			return nil, false, nil // created, crashed before the header was whole
		}
		return nil, false, corrupt(0, "file header", errShort)
	}
	if string(data[:len(fileMagic)]) != fileMagic {
		return nil, false, corrupt(0, "file header", errors.New("not a share state log"))
	}
	var es []entry
	marker := false
	pos := len(fileMagic)
	for pos < len(data) {
		payload, n, err := readFrame(data[pos:])
		if err != nil {
			torn := errors.Is(err, errShort) || pos+n == len(data) || allZero(data[pos:])
			if newest && torn {
				break
			}
			name := "an entry whose key is unreadable"
			if k, _, kerr := decodeKey(payload); kerr == nil {
				name = "the entry for " + k.String()
			}
			return nil, false, corrupt(pos, name, err)
		}
		e, err := decodeEntry(payload)
		if err != nil {
			return nil, false, corrupt(pos, "an entry", err)
		}
		if e.typ == entMarker && e.gen == f.gen {
			marker = true
		}
		es = append(es, e)
		pos += n
	}
	return es, marker, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// replay applies entries to an in-memory image of the durable state.
type replay struct {
	groups map[string]*replayGroup
}

type replayGroup struct {
	id     string
	config GroupConfig
	epoch  int32
	parts  map[partKey]*sharePartition
}

func newReplay() *replay { return &replay{groups: make(map[string]*replayGroup)} }

func (r *replay) group(id string) *replayGroup {
	g := r.groups[id]
	if g == nil {
		g = &replayGroup{id: id, parts: make(map[partKey]*sharePartition)}
		r.groups[id] = g
	}
	return g
}

func (r *replay) apply(e *entry) {
	switch e.typ {
	case entGroup:
		g := r.group(e.group)
		g.config, g.epoch = e.config, e.groupEpoch
	case entGroupDelete:
		delete(r.groups, e.group)
	case entPartDelete:
		if g := r.groups[e.group]; g != nil {
			delete(g.parts, partKey{e.topicID, e.part})
		}
	case entPartDelta, entPartFull:
		g := r.group(e.group)
		k := partKey{e.topicID, e.part}
		sp := g.parts[k]
		if sp == nil || e.typ == entPartFull {
			sp = &sharePartition{topic: e.topic, topicID: e.topicID, part: e.part, status: spLive, spso: e.spso, speo: e.spso - 1, nextDeadline: never}
			g.parts[k] = sp
		}
		if e.spso > sp.spso {
			if e.spso > sp.speo {
				sp.runs, sp.speo = nil, e.spso-1
			} else {
				sp.runs = sp.runs[sp.splitAt(e.spso):]
			}
			sp.spso = e.spso
		}
		for _, d := range e.ranges {
			if d.last < sp.spso {
				continue
			}
			d.first = max(d.first, sp.spso)
			if d.first > sp.speo+1 {
				sp.setRange(sp.speo+1, d.first-1, availableRun(0, 0, 0))
			}
			v := run{state: d.state, count: d.count}
			if d.state.terminal() {
				v.count = 0
			}
			sp.setRange(d.first, d.last, v)
		}
	}
}

// finish normalises the image: trailing AVAILABLE(0) runs are implicit,
// leading terminal runs are below SPSO.
func (r *replay) finish() []*recGroup {
	var out []*recGroup
	for _, g := range r.groups {
		rg := &recGroup{id: g.id, config: g.config, epoch: g.epoch}
		for _, sp := range g.parts {
			for n := len(sp.runs); n > 0 && sp.runs[n-1].state == stAvailable && sp.runs[n-1].count == 0; n = len(sp.runs) {
				sp.runs = sp.runs[:n-1]
			}
			if n := len(sp.runs); n > 0 {
				sp.speo = sp.runs[n-1].last
			} else {
				sp.speo = sp.spso - 1
			}
			sp.advance()
			rg.parts = append(rg.parts, sp)
		}
		slices.SortFunc(rg.parts, func(a, b *sharePartition) int {
			if c := strings.Compare(a.topicID, b.topicID); c != 0 {
				return c
			}
			return int(a.part) - int(b.part)
		})
		out = append(out, rg)
	}
	slices.SortFunc(out, func(a, b *recGroup) int { return strings.Compare(a.id, b.id) })
	return out
}
