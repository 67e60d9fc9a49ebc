package logstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"strconv"
	"strings"
)

// checkpointFile is a partition's recovery checkpoint (see doc.go): what
// Open must find on disk. Written at every roll and at a clean Close,
// replaced atomically.
const checkpointFile = "checkpoint"

const checkpointMagic = "sharelog-partition-checkpoint 1"

// checkpoint is the parsed checkpoint file.
type checkpoint struct {
	logStart int64 // log start offset when written: it never moves back
	hw       int64 // every offset below it was on disk when written
	segs     []ckptSegment
}

// ckptSegment is one sealed segment: its base, the offset after its last
// record, its size in bytes, whether it was fsynced when sealed, and its
// newest timestamp (what time retention needs without reading its time
// index).
type ckptSegment struct {
	base, end, size int64
	synced          bool
	maxTs           int64
}

// encode renders c as text lines followed by a CRC32C line over them.
func (c *checkpoint) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nlog_start %d\nhigh_watermark %d\n", checkpointMagic, c.logStart, c.hw)
	for _, s := range c.segs {
		synced := 0
		if s.synced {
			synced = 1
		}
		fmt.Fprintf(&b, "segment %d %d %d %d %d\n", s.base, s.end, s.size, synced, s.maxTs)
	}
	fmt.Fprintf(&b, "crc32c %08x\n", crc32.Checksum(b.Bytes(), castagnoli))
	return b.Bytes()
}

// readCheckpoint parses path. A missing file is returned as is (the caller
// tests fs.ErrNotExist); anything else wrong is an error naming the file.
func readCheckpoint(path string) (*checkpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := parseCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func parseCheckpoint(data []byte) (*checkpoint, error) {
	i := bytes.LastIndex(data, []byte("crc32c "))
	if i < 0 || !bytes.HasSuffix(data, []byte("\n")) {
		return nil, errors.New("no checksum line (truncated?)")
	}
	want, err := strconv.ParseUint(strings.TrimSpace(string(data[i+len("crc32c "):])), 16, 32)
	if err != nil || crc32.Checksum(data[:i], castagnoli) != uint32(want) {
		return nil, errors.New("checksum mismatch")
	}
	c := &checkpoint{}
	sc := bufio.NewScanner(bytes.NewReader(data[:i]))
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		num := func(k int) int64 {
			v, perr := strconv.ParseInt(f[k], 10, 64)
			if perr != nil || v < 0 {
				err = fmt.Errorf("line %d: bad number %q", line, f[k])
			}
			return v
		}
		switch {
		case line == 1:
			if sc.Text() != checkpointMagic {
				return nil, fmt.Errorf("unknown format %q", sc.Text())
			}
		case len(f) == 2 && f[0] == "log_start":
			c.logStart = num(1)
		case len(f) == 2 && f[0] == "high_watermark":
			c.hw = num(1)
		case len(f) == 6 && f[0] == "segment":
			s := ckptSegment{base: num(1), end: num(2), size: num(3), synced: f[4] == "1"}
			if s.maxTs, err = strconv.ParseInt(f[5], 10, 64); err != nil {
				err = fmt.Errorf("line %d: bad timestamp %q", line, f[5])
			}
			if err == nil && (s.end < s.base || len(c.segs) > 0 && c.segs[len(c.segs)-1].end != s.base) {
				err = fmt.Errorf("line %d: segment [%d, %d) does not follow the previous one", line, s.base, s.end)
			}
			c.segs = append(c.segs, s)
		default:
			return nil, fmt.Errorf("line %d: unexpected %q", line, sc.Text())
		}
		if err != nil {
			return nil, err
		}
	}
	if line == 0 {
		return nil, errors.New("empty")
	}
	if c.logStart > c.hw || len(c.segs) > 0 && c.segs[len(c.segs)-1].end > c.hw {
		return nil, fmt.Errorf("bounds do not agree (log start %d, high watermark %d)", c.logStart, c.hw)
	}
	return c, nil
}

// find returns the checkpoint entry of the segment based at base.
func (c *checkpoint) find(base int64) (ckptSegment, bool) {
	if c == nil {
		return ckptSegment{}, false
	}
	for _, s := range c.segs {
		if s.base == base {
			return s, true
		}
	}
	return ckptSegment{}, false
}

// writeCheckpoint records the partition's sealed segments and hw. The
// caller is the append leader at a roll, the cleaner after a swap, or Open
// or Close; ckMu orders them, and each computes the list from one snapshot
// of the segments under mu, so the last write describes the latest list. A failure is reported and otherwise
// harmless: the previous checkpoint stays, and Open rescans what it does
// not cover.
func (p *partition) writeCheckpoint(hw int64, allSynced bool) error {
	// The cleaner writes it too (after a swap); both write the same temp file.
	p.ckMu.Lock()
	defer p.ckMu.Unlock()
	c := checkpoint{logStart: p.logStart.Load(), hw: hw}
	p.mu.RLock()
	for i := 0; i+1 < len(p.segs); i++ {
		s := p.segs[i]
		if p.segs[i+1].base <= c.logStart {
			continue // reclaimable: Open allows it to be missing
		}
		c.segs = append(c.segs, ckptSegment{base: s.base, end: p.segs[i+1].base, size: s.size.Load(), synced: s.synced.Load() || allSynced, maxTs: s.maxTimestamp()})
	}
	p.mu.RUnlock()
	c.logStart = min(c.logStart, hw)
	return p.st.fs.writeFileAtomic(p.path(checkpointFile), c.encode(), dirSync(p.st.durable()))
}
