package statelog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sharelog/sharelog/internal/storage/sharestate"
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
	baseGen uint64            // the first generation read (0 if none)
	state   *sharestate.State // what the readable entries say
	damage  []damage          // lost acknowledged state found
	files   []string          // the files read or expected (paths), for quarantine
	man     *Manifest         // nil if none was readable
	manErr  error             // why the manifest was not read (errNoManifest if absent)
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
	img := sharestate.NewImage()
	for i, f := range chain {
		path := filepath.Join(dir, f.name)
		rec.files = append(rec.files, path)
		es, dmg := parseFile(path, f.gen, i == len(chain)-1, man.size(f.gen))
		rec.damage = append(rec.damage, dmg...)
		for j := range es {
			if es[j].typ != entMarker {
				img.Apply(&es[j].Entry)
			}
		}
	}
	rec.state = img.State()
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
