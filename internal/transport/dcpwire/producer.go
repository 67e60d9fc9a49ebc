package dcpwire

// The DCP producer's requests (docs/dcp.md "DCP"): DCP_OPEN,
// DCP_CONTROL, GET_FAILOVER_LOG, GET_ALL_VB_SEQNOS, BUFFER_ACK and the
// server's NOOPs. Stream requests and their events are stream.go's.

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"sync"
	"time"

	"github.com/couchbase/gocbcore/v10/memd"

	"github.com/sharelog/sharelog/internal/changestream"
)

// controls are the DCP_CONTROL settings of a connection.
type controls struct {
	noop          bool
	noopInterval  time.Duration
	oso           changestream.OSOMode // OSOOff, OSOOn ("true"), OSOWithOffsetAdvanced ("true_with_seqno_advanced")
	streamIDs     bool
	endOnClose    bool
	openFlags     memd.DcpOpenFlag
	flow          *credit // nil until connection_buffer_size
	seqnoAdvanced bool    // SEQNO_ADVANCED outside OSO snapshots too
	collections   bool    // keys carry the collection id (HELLO Collections), set per stream
}

// defaultNoopInterval is Couchbase's when enable_noop comes without
// set_noop_interval.
const defaultNoopInterval = 120 * time.Second

// dcpOpenConn answers DCP_OPEN: only producer connections (flag 0x01) on
// a selected bucket; a consumer or notifier connection is NOT_SUPPORTED.
func (c *conn) dcpOpenConn(p *packet) error {
	if c.bucket == "" {
		return c.fail(p, memd.StatusNoBucket, "select a bucket (a topic) first")
	}
	if len(p.extras) != 8 {
		return c.fail(p, memd.StatusInvalidArgs, "DCP_OPEN needs 8 bytes of extras")
	}
	flags := memd.DcpOpenFlag(binary.BigEndian.Uint32(p.extras[4:]))
	if flags&memd.DcpOpenFlagProducer == 0 || flags&memd.DcpOpenFlagNotifier != 0 {
		return c.fail(p, memd.StatusNotSupported, "this server is a DCP producer only")
	}
	if c.dcpOpen {
		return c.fail(p, memd.StatusInvalidArgs, "DCP_OPEN was already sent on this connection")
	}
	c.dcpOpen, c.dcpName, c.ctl.openFlags = true, string(p.key), flags
	return c.reply(p, memd.StatusSuccess, nil, nil, nil)
}

// dcpControl answers DCP_CONTROL: the keys a DCP consumer sends (the
// value of each is checked); an unknown key, or a known one with a value
// it does not take, answers EINVAL as Couchbase does.
func (c *conn) dcpControl(p *packet) error {
	if !c.dcpOpen {
		return c.fail(p, memd.StatusInvalidArgs, "DCP_CONTROL before DCP_OPEN")
	}
	key, val := string(p.key), string(p.value)
	bad := func() error {
		return c.fail(p, memd.StatusInvalidArgs, errorf("DCP control %q does not take the value %q", key, val))
	}
	switch key {
	case "enable_noop":
		b, ok := boolValue(val)
		if !ok {
			return bad()
		}
		c.ctl.noop = b
		if b && c.ctl.noopInterval == 0 {
			c.ctl.noopInterval = defaultNoopInterval
		}
		c.startNoops()
	case "set_noop_interval":
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil || n == 0 {
			return bad()
		}
		c.ctl.noopInterval = time.Duration(n) * time.Second
		c.startNoops()
	case "set_priority":
		if val != "low" && val != "medium" && val != "high" {
			return bad()
		}
	case "connection_buffer_size":
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			return bad()
		}
		if c.ctl.flow == nil {
			c.ctl.flow = newCredit()
		}
		c.ctl.flow.setSize(int64(n))
	case "enable_out_of_order_snapshots":
		switch val {
		case "true":
			c.ctl.oso, c.ctl.seqnoAdvanced = changestream.OSOOn, false
		case "true_with_seqno_advanced":
			c.ctl.oso, c.ctl.seqnoAdvanced = changestream.OSOWithOffsetAdvanced, true
		case "false":
			c.ctl.oso, c.ctl.seqnoAdvanced = changestream.OSOOff, false
		default:
			return bad()
		}
	case "enable_expiry_opcode", "send_stream_end_on_client_close_stream", "enable_stream_id", "supports_cursor_dropping_vulcan", "supports_hifi_MFU", "enable_ext_metadata":
		b, ok := boolValue(val)
		if !ok {
			return bad()
		}
		switch key {
		case "send_stream_end_on_client_close_stream":
			c.ctl.endOnClose = b
		case "enable_stream_id":
			c.smu.Lock()
			open := len(c.streams)
			c.smu.Unlock()
			if open > 0 {
				return c.fail(p, memd.StatusInvalidArgs, "enable_stream_id must come before the first stream request")
			}
			c.ctl.streamIDs = b
		}
		// enable_expiry_opcode: no record here expires, so no EXPIRATION
		// is ever sent; the others change nothing on this producer.
	case "max_marker_version":
		// Snapshot markers are sent in their first version (20 bytes of
		// extras), which every version reader accepts.
		if val != "2.0" && val != "2.2" && val != "1.0" {
			return bad()
		}
	case "backfill_order":
		if val != "round-robin" && val != "sequential" {
			return bad()
		}
	default:
		return c.fail(p, memd.StatusInvalidArgs, errorf("unknown DCP control %q", key))
	}
	return c.reply(p, memd.StatusSuccess, nil, nil, nil)
}

func boolValue(s string) (bool, bool) {
	switch s {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// vbuuidOf is the vBucket UUID of every partition of the topic with id:
// 64 bits of its SHA-256, never 0 (the value of a client that holds no
// failover log). A re-created topic has a new id, so a new vbuuid.
func vbuuidOf(topicID string) uint64 {
	sum := sha256.Sum256([]byte(topicID))
	if u := binary.BigEndian.Uint64(sum[:]); u != 0 {
		return u
	}
	return 1
}

// failoverLog answers GET_FAILOVER_LOG: one entry {vbuuid, 0}, as a
// partition's history has only one incarnation.
func (c *conn) failoverLog(p *packet) error {
	if c.bucket == "" {
		return c.fail(p, memd.StatusNoBucket, "select a bucket (a topic) first")
	}
	t, err := c.describe()
	if err != nil {
		return c.fail(p, memd.StatusNotMyVBucket, err.Error())
	}
	if int(p.vbucket) >= len(t.Partitions) {
		return c.fail(p, memd.StatusNotMyVBucket, errorf("topic %q has no partition %d", c.bucket, p.vbucket))
	}
	return c.reply(p, memd.StatusSuccess, nil, nil, failoverEntries(t.Info.ID))
}

func failoverEntries(topicID string) []byte {
	out := binary.BigEndian.AppendUint64(nil, vbuuidOf(topicID))
	return binary.BigEndian.AppendUint64(out, 0)
}

// vbStateActive is the vBucket state every partition has here.
const vbStateActive = 1

// allSeqnos answers GET_ALL_VB_SEQNOS: each partition's high seqno (its
// high watermark: the seqno of offset HW-1 is HW), in cluster mode of the
// partitions this instance serves. A request for another state than
// active gets an empty list.
func (c *conn) allSeqnos(p *packet) error {
	if c.bucket == "" {
		return c.fail(p, memd.StatusNoBucket, "select a bucket (a topic) first")
	}
	if len(p.extras) >= 8 && binary.BigEndian.Uint32(p.extras[4:]) != 0 {
		return c.fail(p, memd.StatusCollectionUnknown, "only the default collection (0) exists")
	}
	if len(p.extras) >= 4 {
		if st := binary.BigEndian.Uint32(p.extras); st != 0 && st != vbStateActive {
			return c.reply(p, memd.StatusSuccess, nil, nil, nil)
		}
	}
	t, err := c.describe()
	if err != nil {
		return c.fail(p, memd.StatusTmpFail, err.Error())
	}
	out := make([]byte, 0, 10*len(t.Partitions))
	for _, part := range t.Partitions {
		if c.l.cfg.Cluster != nil {
			// Cluster mode: the vBuckets active here only, as a
			// Couchbase node answers.
			if _, ok := c.l.cfg.Cluster.Serve(t.Info.ID, part.Partition); !ok {
				continue
			}
		}
		out = binary.BigEndian.AppendUint16(out, uint16(part.Partition))
		out = binary.BigEndian.AppendUint64(out, uint64(part.HighWatermark))
	}
	return c.reply(p, memd.StatusSuccess, nil, nil, out)
}

// bufferAck takes BUFFER_ACK (flow control): the bytes the client
// consumed. It has no answer.
func (c *conn) bufferAck(p *packet) error {
	if len(p.extras) != 4 {
		return c.fail(p, memd.StatusInvalidArgs, "BUFFER_ACK needs 4 bytes of extras")
	}
	if c.ctl.flow != nil {
		c.ctl.flow.ack(int64(binary.BigEndian.Uint32(p.extras)))
	}
	return nil
}

// startNoops starts, once NOOPs are enabled, the goroutine that sends a
// DCP_NOOP every interval (set_noop_interval may come before or after
// enable_noop, and change it later) and closes the connection when the
// client sent nothing (no answer to a NOOP, no buffer ack) for two
// intervals, as Couchbase does.
func (c *conn) startNoops() {
	c.noopEvery.Store(int64(c.ctl.noopInterval))
	select {
	case c.noopChanged <- struct{}{}:
	default:
	}
	if !c.ctl.noop {
		return
	}
	c.noopOnce.Do(func() {
		c.swg.Add(1)
		go func() {
			defer c.swg.Done()
			var opaque uint32
			for {
				interval := time.Duration(c.noopEvery.Load())
				t := time.NewTimer(interval)
				select {
				case <-c.ctx.Done():
					t.Stop()
					return
				case <-c.noopChanged:
					t.Stop()
					continue // the new interval starts now
				case <-t.C:
				}
				if since := time.Since(time.Unix(0, c.lastRead.Load())); since > 2*interval {
					c.l.logger.Info("dcp connection closed", "remote", c.nc.RemoteAddr().String(),
						"reason", "no answer to the DCP NOOPs", "silent_for", since.String())
					c.nc.Close()
					return
				}
				opaque++
				h := header{magic: magicReq, opcode: memd.CmdDcpNoop, opaque: opaque}
				if c.out.write(appendPacket(nil, h, nil, nil, nil), false) != nil {
					return
				}
			}
		}()
	})
}

// credit is a connection's DCP flow control: the bytes of DCP messages
// sent and not yet acknowledged, against connection_buffer_size. A
// stream waits before writing a batch while the unacknowledged bytes are
// at or above the size (so at most one batch more is in flight).
type credit struct {
	mu       sync.Mutex
	size     int64 // 0 = no flow control
	unacked  int64
	released chan struct{} // closed (and replaced) at each ack
}

func newCredit() *credit { return &credit{released: make(chan struct{})} }

func (f *credit) setSize(n int64) {
	f.mu.Lock()
	f.size = n
	f.wake()
	f.mu.Unlock()
}

func (f *credit) wake() {
	close(f.released)
	f.released = make(chan struct{})
}

func (f *credit) ack(n int64) {
	f.mu.Lock()
	f.unacked = max(f.unacked-n, 0)
	f.wake()
	f.mu.Unlock()
}

// take waits until n more bytes may be sent (or done closes: false) and
// counts them.
func (f *credit) take(n int64, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		if f.size == 0 || f.unacked < f.size {
			f.unacked += n
			f.mu.Unlock()
			return true
		}
		ch := f.released
		f.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}
