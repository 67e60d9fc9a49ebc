package statelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"unicode/utf8"

	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// State-log entry format (see doc.go, "State log").
//
//	frame   := u32 len | u32 crc32c(len bytes ‖ payload) | payload[len]
//	payload := u8 type | key | u32 crc32c(type ‖ key) | body
//
// The key names what the entry is about (group, share-partition) and has
// its own checksum, so that when a frame fails its checksum recovery can
// still name the group and share-partition it belonged to — or say that it
// cannot. All integers in key and body are (u)varints; strings are a uvarint
// length and the bytes.

// Entry types: the sharestate kinds, and the snapshot marker, which only
// the file format has.
const (
	entGroup            = byte(sharestate.KindGroup)       // key: group; body: group_epoch, explicitly set config
	entGroupDelete      = byte(sharestate.KindGroupDelete) // key: group; body: empty
	entPartDelta        = byte(sharestate.KindPartDelta)   // key: share-partition; body: SPSO, ranges to set
	entPartFull         = byte(sharestate.KindPartFull)    // key: share-partition; body: SPSO, every non-default range
	entPartDelete       = byte(sharestate.KindPartDelete)  // key: share-partition; body: empty (uninitialised again)
	entMarker      byte = 6                                // key: empty; body: generation whose snapshot is complete
	entPartOffline      = byte(sharestate.KindPartOffline) // key: share-partition; body: why its durable state is lost
)

// Bounds of decoded names (those of the share-group API).
const (
	maxGroupIDLen = 249
	maxTopicLen   = 249
)

const (
	frameHeader = 8
	// maxEntry bounds one frame's payload: the largest full state is
	// partition_max_record_locks (≤ 10 000) ranges of a few bytes each
	// plus the key, far below this.
	maxEntry = 16 << 20
	// fileMagic starts every state-log file.
	fileMagic = "SLSGLOG1"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Config field bits of entGroup bodies, in field order.
const (
	cfgLockMs = 1 << iota
	cfgDeliveryLimit
	cfgMaxLocks
	cfgAutoReset
	cfgSessionTimeout
	cfgHeartbeat
	cfgDeadLetterTopic
	cfgOrdering
	cfgBackoffInitial
	cfgBackoffMax
	cfgBackoffMultiplier
	cfgIsolation
	cfgAll = 1<<iota - 1
)

// entry is a decoded state-log entry: a sharestate entry, or a marker.
type entry struct {
	sharestate.Entry
	typ byte
	gen uint64 // entMarker
}

// --- encoding ---------------------------------------------------------------

// frameStart reserves a frame header and writes the payload's type and
// key; finish it with frameEnd after appending the body.
func frameStart(b []byte, typ byte) (out []byte, start int) {
	start = len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, typ)
	return b, start
}

// keyEnd appends the key checksum; keyStart is the payload's start.
func keyEnd(b []byte, start int) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start+frameHeader:], castagnoli))
}

// frameEnd fills in the frame header.
func frameEnd(b []byte, start int) []byte {
	n := len(b) - start - frameHeader
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	c := crc32.Update(0, castagnoli, b[start:start+4])
	c = crc32.Update(c, castagnoli, b[start+frameHeader:])
	binary.BigEndian.PutUint32(b[start+4:], c)
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendEntry appends e's frame (e.Kind must be a sharestate kind).
func appendEntry(b []byte, e *sharestate.Entry) []byte {
	switch e.Kind {
	case sharestate.KindGroup:
		return appendGroupEntry(b, e.Group, e.GroupEpoch, &e.Config)
	case sharestate.KindGroupDelete:
		return appendGroupDelete(b, e.Group)
	case sharestate.KindPartDelta, sharestate.KindPartFull:
		b, start := partKeyStart(b, byte(e.Kind), e)
		b = appendRanges(b, e.SPSO, e.Ranges)
		return frameEnd(b, start)
	case sharestate.KindPartDelete:
		b, start := partKeyStart(b, entPartDelete, e)
		return frameEnd(b, start)
	case sharestate.KindPartOffline:
		b, start := partKeyStart(b, entPartOffline, e)
		b = appendString(b, e.Reason)
		return frameEnd(b, start)
	}
	panic(fmt.Sprintf("statelog: cannot encode an entry of %v", e.Kind))
}

func appendGroupEntry(b []byte, group string, groupEpoch int32, c *sharestate.GroupConfig) []byte {
	b, start := frameStart(b, entGroup)
	b = appendString(b, group)
	b = keyEnd(b, start)
	b = binary.AppendVarint(b, int64(groupEpoch))
	var mask uint64
	for i, set := range []bool{c.RecordLockDurationMs != nil, c.DeliveryCountLimit != nil, c.PartitionMaxRecordLocks != nil,
		c.AutoOffsetReset != nil, c.SessionTimeoutMs != nil, c.HeartbeatIntervalMs != nil, c.DeadLetterTopic != nil,
		c.Ordering != nil, c.RedeliveryBackoffInitialMs != nil, c.RedeliveryBackoffMaxMs != nil, c.RedeliveryBackoffMultiplier != nil,
		c.IsolationLevel != nil} {
		if set {
			mask |= 1 << i
		}
	}
	b = binary.AppendUvarint(b, mask)
	for _, v := range []*int32{c.RecordLockDurationMs, c.DeliveryCountLimit, c.PartitionMaxRecordLocks} {
		if v != nil {
			b = binary.AppendVarint(b, int64(*v))
		}
	}
	if c.AutoOffsetReset != nil {
		b = appendString(b, *c.AutoOffsetReset)
	}
	for _, v := range []*int32{c.SessionTimeoutMs, c.HeartbeatIntervalMs} {
		if v != nil {
			b = binary.AppendVarint(b, int64(*v))
		}
	}
	if c.DeadLetterTopic != nil {
		b = appendString(b, *c.DeadLetterTopic)
	}
	if c.Ordering != nil {
		b = appendString(b, *c.Ordering)
	}
	for _, v := range []*int32{c.RedeliveryBackoffInitialMs, c.RedeliveryBackoffMaxMs} {
		if v != nil {
			b = binary.AppendVarint(b, int64(*v))
		}
	}
	if c.RedeliveryBackoffMultiplier != nil {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(*c.RedeliveryBackoffMultiplier))
	}
	if c.IsolationLevel != nil {
		b = appendString(b, *c.IsolationLevel)
	}
	return frameEnd(b, start)
}

func appendGroupDelete(b []byte, group string) []byte {
	b, start := frameStart(b, entGroupDelete)
	b = appendString(b, group)
	b = keyEnd(b, start)
	return frameEnd(b, start)
}

// partKeyStart starts a share-partition entry and writes its key.
func partKeyStart(b []byte, typ byte, e *sharestate.Entry) ([]byte, int) {
	b, start := frameStart(b, typ)
	b = appendString(b, e.Group)
	b = appendString(b, e.Topic)
	b = appendString(b, e.TopicID)
	b = binary.AppendVarint(b, int64(e.Partition))
	return keyEnd(b, start), start
}

// appendRanges appends a range list: count, then per range the distance of
// first from the previous range's end (or from spso), the length - 1, the
// state and the count. Ranges must ascend from spso.
func appendRanges(b []byte, spso int64, rs []sharestate.Range) []byte {
	b = binary.AppendVarint(b, spso)
	b = binary.AppendUvarint(b, uint64(len(rs)))
	prev := spso
	for _, r := range rs {
		b = binary.AppendUvarint(b, uint64(r.First-prev))
		b = binary.AppendUvarint(b, uint64(r.Last-r.First))
		b = append(b, byte(r.State))
		b = binary.AppendUvarint(b, uint64(r.Count))
		prev = r.Last + 1
	}
	return b
}

func appendMarker(b []byte, gen uint64) []byte {
	b, start := frameStart(b, entMarker)
	b = keyEnd(b, start)
	b = binary.AppendUvarint(b, gen)
	return frameEnd(b, start)
}

// --- decoding ---------------------------------------------------------------

var (
	errShort = errors.New("truncated frame")
	errCRC   = errors.New("checksum mismatch")
	errBad   = errors.New("malformed entry")
)

// readFrame splits the frame at the start of b. It returns errShort when b
// holds less than the whole frame (a torn tail if at the end of the newest
// file) and errCRC when the checksum fails; payload is then still the
// claimed payload (for naming, see decodeKey).
func readFrame(b []byte) (payload []byte, n int, err error) {
	if len(b) < frameHeader {
		return nil, 0, errShort
	}
	ln := binary.BigEndian.Uint32(b)
	if uint64(len(b)-frameHeader) < uint64(ln) {
		return nil, 0, errShort
	}
	if ln > maxEntry {
		return nil, frameHeader + int(ln), fmt.Errorf("%w: length %d", errCRC, ln)
	}
	payload = b[frameHeader : frameHeader+int(ln)]
	c := crc32.Update(0, castagnoli, b[:4])
	c = crc32.Update(c, castagnoli, payload)
	if c != binary.BigEndian.Uint32(b[4:]) {
		return payload, frameHeader + int(ln), errCRC
	}
	return payload, frameHeader + int(ln), nil
}

// decoder reads varints and strings with bounds checks: damaged input
// fails with errBad, never panics and never allocates more than its size.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errBad
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int32v() int32 {
	v := d.varint()
	if int64(int32(v)) != v {
		d.fail()
	}
	return int32(v)
}

func (d *decoder) uint64be() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) byte1() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) str(maxLen int) string {
	n := d.uvarint()
	if d.err != nil || n > uint64(maxLen) || n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	if !utf8.ValidString(s) {
		d.fail()
	}
	return s
}

// entryKey is the decoded key of an entry.
type entryKey struct {
	typ byte
	sharestate.PartitionKey
}

func (k entryKey) String() string {
	switch k.typ {
	case entGroup, entGroupDelete:
		return fmt.Sprintf("group %q", k.Group)
	case entPartDelta, entPartFull, entPartDelete, entPartOffline:
		return k.PartitionKey.String()
	case entMarker:
		return "snapshot marker"
	}
	return fmt.Sprintf("entry type %d", k.typ)
}

// decodeKey decodes the type and key of a payload and checks the key's own
// checksum. It returns the rest (the body).
func decodeKey(p []byte) (k entryKey, body []byte, err error) {
	d := decoder{b: p}
	k.typ = d.byte1()
	switch k.typ {
	case entGroup, entGroupDelete:
		k.Group = d.str(maxGroupIDLen)
	case entPartDelta, entPartFull, entPartDelete, entPartOffline:
		k.Group = d.str(maxGroupIDLen)
		k.Topic = d.str(maxTopicLen)
		k.TopicID = d.str(maxTopicLen)
		k.Partition = d.int32v()
	case entMarker:
	default:
		d.fail()
	}
	if d.err != nil {
		return entryKey{}, nil, d.err
	}
	keyLen := len(p) - len(d.b)
	if len(d.b) < 4 || binary.BigEndian.Uint32(d.b) != crc32.Checksum(p[:keyLen], castagnoli) {
		return entryKey{}, nil, fmt.Errorf("%w: key checksum", errBad)
	}
	return k, d.b[4:], nil
}

// decodeEntry decodes a payload whose frame checksum passed.
func decodeEntry(p []byte) (entry, error) {
	k, body, err := decodeKey(p)
	if err != nil {
		return entry{}, err
	}
	e := entry{typ: k.typ, Entry: sharestate.Entry{Kind: sharestate.Kind(k.typ), Group: k.Group, Topic: k.Topic, TopicID: k.TopicID, Partition: k.Partition}}
	d := decoder{b: body}
	switch k.typ {
	case entGroup:
		e.GroupEpoch = d.int32v()
		mask := d.uvarint()
		if mask&^cfgAll != 0 {
			d.fail()
		}
		get := func(bit uint64) *int32 {
			if mask&bit == 0 {
				return nil
			}
			v := d.int32v()
			return &v
		}
		e.Config.RecordLockDurationMs = get(cfgLockMs)
		e.Config.DeliveryCountLimit = get(cfgDeliveryLimit)
		e.Config.PartitionMaxRecordLocks = get(cfgMaxLocks)
		if mask&cfgAutoReset != 0 {
			s := d.str(256)
			e.Config.AutoOffsetReset = &s
		}
		e.Config.SessionTimeoutMs = get(cfgSessionTimeout)
		e.Config.HeartbeatIntervalMs = get(cfgHeartbeat)
		if mask&cfgDeadLetterTopic != 0 {
			s := d.str(maxTopicLen)
			e.Config.DeadLetterTopic = &s
		}
		if mask&cfgOrdering != 0 {
			s := d.str(16)
			e.Config.Ordering = &s
		}
		e.Config.RedeliveryBackoffInitialMs = get(cfgBackoffInitial)
		e.Config.RedeliveryBackoffMaxMs = get(cfgBackoffMax)
		if mask&cfgBackoffMultiplier != 0 {
			v := math.Float64frombits(d.uint64be())
			e.Config.RedeliveryBackoffMultiplier = &v
		}
		if mask&cfgIsolation != 0 {
			s := d.str(32)
			e.Config.IsolationLevel = &s
		}
	case entPartDelta, entPartFull:
		if k.Partition < 0 {
			d.fail()
		}
		e.SPSO = d.varint()
		n := d.uvarint()
		// Each range takes at least 4 bytes: never allocate more than the
		// input can hold.
		if e.SPSO < 0 || n > uint64(len(d.b)/4) {
			d.fail()
			break
		}
		e.Ranges = make([]sharestate.Range, 0, n)
		prev := e.SPSO
		for range n {
			gap, ln := d.uvarint(), d.uvarint()
			st, cnt := sharestate.RecState(d.byte1()), d.uvarint()
			if d.err != nil {
				break
			}
			if gap > 1<<62 || ln > 1<<62 || cnt > maxStoredCount ||
				(st != sharestate.Available && st != sharestate.Acknowledged && st != sharestate.Archived && st != sharestate.Archiving) ||
				(st.Terminal() && cnt != 0) {
				d.fail()
				break
			}
			first := prev + int64(gap)
			last := first + int64(ln)
			if first < prev || last < first {
				d.fail() // overflow
				break
			}
			e.Ranges = append(e.Ranges, sharestate.Range{First: first, Last: last, State: st, Count: int16(cnt)})
			prev = last + 1
		}
	case entPartOffline:
		e.Reason = d.str(maxReasonLen)
	case entPartDelete, entGroupDelete:
	case entMarker:
		e.gen = d.uvarint()
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail() // the body must be consumed exactly
	}
	if d.err != nil {
		return entry{}, fmt.Errorf("%s: %w", k, d.err)
	}
	return e, nil
}

// maxStoredCount bounds decoded delivery counts: the limit is at most 10,
// the rest is room for future changes of the bounds.
const maxStoredCount = 1000
