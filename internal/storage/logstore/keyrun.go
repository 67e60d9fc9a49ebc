package logstore

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"sort"
)

// Key-index runs (.keys files): one per sealed segment, sorted by key, every
// keyed record of the segment. Layout (integers big-endian unless uvarint):
//
//	block*   u32 payload length | u32 CRC32C(payload) | payload
//	         payload = group*; group = uvarint key length | key |
//	                   uvarint count | count × entry
//	         entry = uvarint((offset-base)<<1 | tombstone) |
//	                 uvarint frame position | uvarint frame length
//	index    per block: uvarint first-key length | first key |
//	                    uvarint block position | uvarint keys in the block
//	footer   u64 index position | u32 index length | u32 CRC32C(index) |
//	         i64 segment base | u32 entries | u32 magic "SLK2"
//
// A key's group never spans blocks and its offsets ascend. Blocks are cut
// after keyBlockSize bytes, so a prefix seek binary searches the index
// (held in memory, about one key per 4 KiB) and reads from one block on,
// and a prefix's keys are counted from the index without reading blocks
// (but the two at its ends). Each entry locates its record's frame in the
// segment file (position and length 0: unknown), so an OSO snapshot reads
// a record with one pread. A run of another version (magic) fails to load
// and is rebuilt from its segment.
const (
	keysSuffix      = ".keys"
	keyBlockSize    = 4096
	keyFooterSize   = 8 + 4 + 4 + 8 + 4 + 4
	keyRunMagic     = 0x534c4b32 // "SLK2"
	keyBlockHdrSize = 8
)

var errBadRun = errors.New("bad key index run")

// blockRef locates one block of a run.
type blockRef struct {
	first []byte
	pos   int64
	size  int64 // header included
	keys  int64 // key groups in the block
}

// runIndex is a run file's parsed block index.
type runIndex struct {
	base    int64
	entries int64
	blocks  []blockRef
}

// writeRun writes m as the run of the segment based at base to path (temp
// file then rename). No fsync: a run lost or torn by a crash fails its
// checksums and is rebuilt from the segment.
func writeRun(path string, base int64, m *memIndex) (*runIndex, error) {
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	ri, err := encodeRun(f, base, m)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return nil, err
	}
	return ri, nil
}

func encodeRun(w io.Writer, base int64, m *memIndex) (*runIndex, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	ri := &runIndex{base: base}
	var block, scratch []byte
	var first []byte
	pos, keys := int64(0), int64(0)
	flush := func() error {
		if len(block) == 0 {
			return nil
		}
		var hdr [keyBlockHdrSize]byte
		binary.BigEndian.PutUint32(hdr[:], uint32(len(block)))
		binary.BigEndian.PutUint32(hdr[4:], crc32.Checksum(block, castagnoli))
		if _, err := bw.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := bw.Write(block); err != nil {
			return err
		}
		size := int64(keyBlockHdrSize + len(block))
		ri.blocks = append(ri.blocks, blockRef{first: first, pos: pos, size: size, keys: keys})
		pos += size
		block, first, keys = block[:0], nil, 0
		return nil
	}
	var werr error
	m.mu.RLock()
	m.tree.Ascend(func(k *memKey) bool {
		if len(block) == 0 {
			first = bytes.Clone(k.key)
		}
		scratch = binary.AppendUvarint(scratch[:0], uint64(len(k.key)))
		scratch = append(scratch, k.key...)
		scratch = binary.AppendUvarint(scratch, uint64(len(k.offs)))
		for _, e := range k.offs {
			off, tomb := unpackEntry(e.v)
			scratch = binary.AppendUvarint(scratch, packEntry(off-base, tomb))
			scratch = binary.AppendUvarint(scratch, uint64(e.loc.pos))
			scratch = binary.AppendUvarint(scratch, uint64(e.loc.size))
		}
		block = append(block, scratch...)
		keys++
		ri.entries += int64(len(k.offs))
		if len(block) >= keyBlockSize {
			werr = flush()
		}
		return werr == nil
	})
	m.mu.RUnlock()
	if werr != nil {
		return nil, werr
	}
	if err := flush(); err != nil {
		return nil, err
	}
	var idx []byte
	for _, b := range ri.blocks {
		idx = binary.AppendUvarint(idx, uint64(len(b.first)))
		idx = append(idx, b.first...)
		idx = binary.AppendUvarint(idx, uint64(b.pos))
		idx = binary.AppendUvarint(idx, uint64(b.keys))
	}
	foot := make([]byte, 0, keyFooterSize)
	foot = binary.BigEndian.AppendUint64(foot, uint64(pos))
	foot = binary.BigEndian.AppendUint32(foot, uint32(len(idx)))
	foot = binary.BigEndian.AppendUint32(foot, crc32.Checksum(idx, castagnoli))
	foot = binary.BigEndian.AppendUint64(foot, uint64(base))
	foot = binary.BigEndian.AppendUint32(foot, uint32(ri.entries))
	foot = binary.BigEndian.AppendUint32(foot, keyRunMagic)
	if _, err := bw.Write(idx); err != nil {
		return nil, err
	}
	if _, err := bw.Write(foot); err != nil {
		return nil, err
	}
	return ri, bw.Flush()
}

// loadRun reads and checks a run's footer and block index. Block checksums
// are checked when blocks are read.
func loadRun(path string, base int64) (*runIndex, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < keyFooterSize {
		return nil, errBadRun
	}
	var foot [keyFooterSize]byte
	if _, err := f.ReadAt(foot[:], size-keyFooterSize); err != nil {
		return nil, err
	}
	idxPos := int64(binary.BigEndian.Uint64(foot[0:]))
	idxLen := int64(binary.BigEndian.Uint32(foot[8:]))
	idxCRC := binary.BigEndian.Uint32(foot[12:])
	if binary.BigEndian.Uint32(foot[28:]) != keyRunMagic || int64(binary.BigEndian.Uint64(foot[16:])) != base ||
		idxPos < 0 || idxPos+idxLen+keyFooterSize != size {
		return nil, errBadRun
	}
	idx := make([]byte, idxLen)
	if _, err := f.ReadAt(idx, idxPos); err != nil {
		return nil, err
	}
	if crc32.Checksum(idx, castagnoli) != idxCRC {
		return nil, errBadRun
	}
	ri := &runIndex{base: base, entries: int64(binary.BigEndian.Uint32(foot[24:]))}
	for len(idx) > 0 {
		kl, n := binary.Uvarint(idx)
		if n <= 0 || uint64(len(idx)-n) < kl {
			return nil, errBadRun
		}
		first := idx[n : n+int(kl)]
		idx = idx[n+int(kl):]
		p, n := binary.Uvarint(idx)
		if n <= 0 {
			return nil, errBadRun
		}
		idx = idx[n:]
		k, n := binary.Uvarint(idx)
		if n <= 0 || k == 0 || k > math.MaxUint32 {
			return nil, errBadRun
		}
		idx = idx[n:]
		ri.blocks = append(ri.blocks, blockRef{first: first, pos: int64(p), keys: int64(k)})
	}
	for i := range ri.blocks {
		end := idxPos
		if i+1 < len(ri.blocks) {
			end = ri.blocks[i+1].pos
		}
		ri.blocks[i].size = end - ri.blocks[i].pos
		if ri.blocks[i].size <= keyBlockHdrSize || i > 0 && bytes.Compare(ri.blocks[i-1].first, ri.blocks[i].first) >= 0 {
			return nil, errBadRun
		}
	}
	if len(ri.blocks) > 0 && ri.blocks[0].pos != 0 || len(ri.blocks) == 0 && idxPos != 0 {
		return nil, errBadRun
	}
	return ri, nil
}

// runIter reads the groups of one run under a prefix, one block at a time.
type runIter struct {
	f      *os.File
	ri     *runIndex
	prefix []byte
	end    int64
	blk    int    // next block to read
	data   []byte // unread payload of the current block
	buf    []byte
	k      []byte
	ent    memEnt
	e      error
	done   bool
	// onCorrupt is called once when a block fails its checksum.
	onCorrupt func()
}

func newRunIter(f *os.File, ri *runIndex, prefix []byte, end int64) *runIter {
	// Last block whose first key is <= prefix: the prefix's keys start there
	// (or in a later block).
	b := sort.Search(len(ri.blocks), func(i int) bool { return bytes.Compare(ri.blocks[i].first, prefix) > 0 })
	return &runIter{f: f, ri: ri, prefix: prefix, end: end, blk: max(b-1, 0)}
}

func (it *runIter) next() bool {
	for !it.done {
		if len(it.data) == 0 {
			if it.blk >= len(it.ri.blocks) {
				it.done = true
				return false
			}
			if err := it.readBlock(); err != nil {
				it.e, it.done = err, true
				return false
			}
			continue
		}
		key, offs, err := it.group()
		if err != nil {
			it.e, it.done = err, true
			return false
		}
		if c := bytes.Compare(key, it.prefix); c < 0 {
			continue
		} else if !bytes.HasPrefix(key, it.prefix) {
			it.done = true
			return false
		}
		if len(key) == 0 {
			continue
		}
		var best memEnt
		ok := false
		for len(offs) > 0 {
			v, n1 := binary.Uvarint(offs)
			pos, n2 := uvarintAt(offs, n1)
			size, n3 := uvarintAt(offs, n2)
			if n1 <= 0 || n2 <= 0 || n3 <= 0 {
				it.e, it.done = it.corrupt(), true
				return false
			}
			offs = offs[n3:]
			rel, tomb := unpackEntry(v)
			if it.ri.base+rel >= it.end {
				break // offsets ascend
			}
			best, ok = memEnt{v: packEntry(it.ri.base+rel, tomb)}, true
			if pos <= math.MaxUint32 && size <= math.MaxUint32 {
				best.loc = recLoc{pos: uint32(pos), size: uint32(size)}
			}
		}
		if ok {
			it.k, it.ent = key, best
			return true
		}
	}
	return false
}

// group parses the next group of the current block; offs is its raw
// uvarint list (count already checked).
func (it *runIter) group() (key, offs []byte, err error) {
	d := it.data
	kl, n := binary.Uvarint(d)
	if n <= 0 || uint64(len(d)-n) < kl {
		return nil, nil, it.corrupt()
	}
	key = d[n : n+int(kl)]
	d = d[n+int(kl):]
	cnt, n := binary.Uvarint(d)
	if n <= 0 || cnt == 0 || cnt > uint64(len(d)) {
		return nil, nil, it.corrupt()
	}
	d = d[n:]
	start := d
	for i := uint64(0); i < 3*cnt; i++ { // three uvarints per entry
		_, n := binary.Uvarint(d)
		if n <= 0 {
			return nil, nil, it.corrupt()
		}
		d = d[n:]
	}
	it.data = d
	return key, start[:len(start)-len(d)], nil
}

func (it *runIter) readBlock() error {
	b := it.ri.blocks[it.blk]
	it.blk++
	if cap(it.buf) < int(b.size) {
		it.buf = make([]byte, b.size)
	}
	buf := it.buf[:b.size]
	if _, err := it.f.ReadAt(buf, b.pos); err != nil {
		return fmt.Errorf("read key index run: %w", err)
	}
	pl := binary.BigEndian.Uint32(buf)
	if int64(pl)+keyBlockHdrSize != b.size || crc32.Checksum(buf[keyBlockHdrSize:], castagnoli) != binary.BigEndian.Uint32(buf[4:]) {
		return it.corrupt()
	}
	it.data = buf[keyBlockHdrSize:]
	return nil
}

func (it *runIter) corrupt() error {
	if it.onCorrupt != nil {
		it.onCorrupt()
		it.onCorrupt = nil
	}
	return fmt.Errorf("key index run of segment %020d: %w: %w", it.ri.base, errBadRun, ErrCorrupt)
}

func (it *runIter) key() []byte   { return it.k }
func (it *runIter) entry() memEnt { return it.ent }
func (it *runIter) err() error    { return it.e }
func (it *runIter) close() {
	if it.f != nil {
		_ = it.f.Close()
		it.f = nil
	}
}

// uvarintAt decodes the uvarint at b[at:] and returns it with the position
// after it; the position is <= 0 if at <= 0 or the uvarint is bad.
func uvarintAt(b []byte, at int) (uint64, int) {
	if at <= 0 || at > len(b) {
		return 0, 0
	}
	v, n := binary.Uvarint(b[at:])
	if n <= 0 {
		return 0, 0
	}
	return v, at + n
}

// countPrefix bounds, from the block index alone, the keys of the run that
// start with prefix (non-empty keys only): lo counts the blocks wholly
// inside the prefix's key range, hi every block that may hold one.
func (ri *runIndex) countPrefix(prefix []byte) (lo, hi int64) {
	bl := ri.blocks
	b := sort.Search(len(bl), func(i int) bool { return bytes.Compare(bl[i].first, prefix) > 0 })
	for i := max(b-1, 0); i < len(bl); i++ {
		in := bytes.HasPrefix(bl[i].first, prefix)
		if !in && i >= b {
			break // this block and the later ones are past the prefix
		}
		hi += bl[i].keys
		// The keys with a prefix are one contiguous range: a block whose
		// first key and whose successor's first key both have it holds
		// only such keys. With no prefix every block does.
		if len(prefix) == 0 || in && i+1 < len(bl) && bytes.HasPrefix(bl[i+1].first, prefix) {
			lo += bl[i].keys
			if len(bl[i].first) == 0 {
				lo-- // the empty key matches no prefix
			}
		}
	}
	return lo, hi
}
