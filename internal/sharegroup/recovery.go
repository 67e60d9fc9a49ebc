package sharegroup

import (
	"bytes"
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
	baseGen uint64      // the first generation read (0 if none)
	groups  []*recGroup // sorted by id
	damage  []damage    // lost acknowledged state found
	files   []string    // the files read or expected (paths), for quarantine
	man     *manifest   // nil if none was readable
	manErr  error       // why the manifest was not read (errNoManifest if absent)
}

type recGroup struct {
	id     string
	config GroupConfig
	epoch  int32
	// replay-only objects: status, spso, speo, runs, offline. A
	// share-partition known only from the manifest (all its entries lost)
	// is spUninit and offline.
	parts []*sharePartition
}

// damage is lost acknowledged state found by recovery: a file missing or
// shorter than its checkpoint, or an entry that fails its checksum or
// format before the torn tail.
type damage struct {
	file   string // path
	offset int64  // -1 for the whole file
	what   string
	key    *entryKey // the damaged entry's key if intact; nil: every share-partition of the file
}

func (d *damage) String() string {
	if d.offset < 0 {
		return fmt.Sprintf("%s: %s", d.file, d.what)
	}
	return fmt.Sprintf("%s at byte %d: %s", d.file, d.offset, d.what)
}

// recoverDir reads the state log. With a manifest: from its base
// generation through the newest file, checking each listed file against
// its checkpoint. Without one (a directory from before manifests, or the
// manifest lost): from the newest file holding its snapshot marker through
// the newest file, trusting the files' own checksums.
func recoverDir(dir string) (*recovered, error) {
	files, err := listGenerations(dir)
	if err != nil {
		return nil, err
	}
	rec := &recovered{}
	rec.man, rec.manErr = readManifest(dir)
	man := rec.man
	if len(files) > 0 {
		rec.lastGen = files[len(files)-1].gen
	}
	var chain []genFile
	if man != nil {
		exists := map[uint64]bool{}
		for _, f := range files {
			exists[f.gen] = true
			if f.gen >= man.Base {
				chain = append(chain, f)
			}
		}
		for _, mf := range man.Files {
			rec.lastGen = max(rec.lastGen, mf.Gen)
			if !exists[mf.Gen] && mf.Gen >= man.Base {
				path := filepath.Join(dir, genFileName(mf.Gen))
				rec.damage = append(rec.damage, damage{file: path, offset: -1,
					what: fmt.Sprintf("file missing (the manifest says it held %d bytes)", mf.Size)})
			}
		}
	} else {
		// Parse from the newest file back to the newest one with a marker
		// (older files are superseded and not read).
		for i := len(files) - 1; i >= 0; i-- {
			chain = append(chain, files[i])
			if hasMarker(dir, files[i]) {
				break
			}
		}
		slices.Reverse(chain)
	}
	if len(chain) > 0 {
		rec.baseGen = chain[0].gen
	}
	r := newReplay()
	for i, f := range chain {
		path := filepath.Join(dir, f.name)
		rec.files = append(rec.files, path)
		es, dmg := parseFile(path, f.gen, i == len(chain)-1, man.size(f.gen))
		rec.damage = append(rec.damage, dmg...)
		for j := range es {
			r.apply(&es[j])
		}
	}
	rec.groups = r.finish()
	return rec, nil
}

// hasMarker reports whether the file holds its own snapshot marker.
func hasMarker(dir string, f genFile) bool {
	es, _ := parseFile(filepath.Join(dir, f.name), f.gen, false, 0)
	for i := range es {
		if es[i].typ == entMarker && es[i].gen == f.gen {
			return true
		}
	}
	return false
}

// parseFile decodes one file, returning the readable entries and the
// damage found. checkpoint is a size the file is known to have reached
// durably (0 if unknown). In the newest file, a frame cut short, a bad
// frame with nothing readable after it, or zeros to the end, past the
// checkpoint, is a torn tail: where the log ends (those entries were never
// acknowledged). Anything else is damage: a bad frame is skipped (the
// reader resynchronises on the next frame whose checksum holds) and
// reported with its key if the key's own checksum holds.
func parseFile(path string, gen uint64, newest bool, checkpoint int64) ([]entry, []damage) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []damage{{file: path, offset: -1, what: fmt.Sprintf("unreadable: %v", err)}}
	}
	var dmg []damage
	if int64(len(data)) < checkpoint {
		dmg = append(dmg, damage{file: path, offset: -1,
			what: fmt.Sprintf("truncated to %d bytes below its checkpoint of %d bytes", len(data), checkpoint)})
	}
	if len(data) < len(fileMagic) {
		if len(dmg) == 0 && newest && bytes.Equal(data, []byte(fileMagic)[:len(data)]) {
			return nil, nil // created, crashed before the header was whole
		}
		if len(dmg) == 0 {
			dmg = append(dmg, damage{file: path, offset: 0, what: "file header cut short"})
		}
		return nil, dmg
	}
	if string(data[:len(fileMagic)]) != fileMagic {
		return nil, append(dmg, damage{file: path, offset: 0, what: "not a share state log (bad file header)"})
	}
	var es []entry
	pos := len(fileMagic)
	for pos < len(data) {
		payload, n, err := readFrame(data[pos:])
		if err == nil {
			var e entry
			if e, err = decodeEntry(payload); err == nil {
				es = append(es, e)
				pos += n
				continue
			}
		}
		next := resync(data, pos+1)
		if next < 0 && newest && int64(pos) >= checkpoint {
			break // torn tail
		}
		d := damage{file: path, offset: int64(pos), what: err.Error()}
		if k, _, kerr := decodeKey(data[pos+min(frameHeader, len(data)-pos):]); kerr == nil {
			d.key = &k
		}
		switch {
		case next >= 0:
			d.what += "; the entry is lost"
		case n > 0 && pos+n == len(data) && d.key != nil:
			d.what += "; the last entry is lost"
		default:
			d.what += "; nothing after it is readable"
			d.key = nil
		}
		dmg = append(dmg, d)
		if next < 0 {
			break
		}
		pos = next
	}
	return es, dmg
}

// resync finds the first position from q on where a whole frame with a
// good checksum and a decodable entry starts, or -1.
func resync(data []byte, q int) int {
	for ; q+frameHeader <= len(data); q++ {
		p, _, err := readFrame(data[q:])
		if err != nil {
			continue
		}
		if _, err := decodeEntry(p); err == nil {
			return q
		}
	}
	return -1
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
	case entPartOffline:
		g := r.group(e.group)
		k := partKey{e.topicID, e.part}
		sp := g.parts[k]
		if sp == nil {
			sp = &sharePartition{topic: e.topic, topicID: e.topicID, part: e.part, status: spUninit, speo: -1, nextDeadline: never}
			g.parts[k] = sp
		}
		sp.offline = e.reason
	case entPartDelta, entPartFull:
		g := r.group(e.group)
		k := partKey{e.topicID, e.part}
		sp := g.parts[k]
		if sp == nil || e.typ == entPartFull || sp.status != spLive {
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
			if sp.status != spLive {
				rg.parts = append(rg.parts, sp)
				continue
			}
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
