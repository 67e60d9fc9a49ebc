package dcpwire

// DCP_STREAM_REQ and CLOSE_STREAM (docs/dcp.md "Streams"). A stream
// request is translated into a changestream.Request and run by the same
// changestream.Manager as the gRPC StreamChanges, so every rule about
// snapshots, OSO, resume points and rollbacks is the domain's:
//
//   - start_seqno S (the client holds every seqno <= S) is start_offset S,
//     because seqno = offset + 1; end_seqno E (inclusive, 2^64-1 = none)
//     is end_offset E (exclusive).
//   - The vbuuid is checked through the domain: with S > 0, a vbuuid that
//     is the current topic's sends its topic_id, any other sends a
//     topic_id no topic has, so the domain answers ROLLBACK_REQUIRED
//     (topic_recreated). S = 0 never rolls back.
//   - ROLLBACK_REQUIRED answers ROLLBACK with the domain's
//     rollback_offset (always 0) as the seqno; OFFSET_OUT_OF_RANGE answers
//     ERANGE; an unknown partition NOT_MY_VBUCKET; READ refused EACCESS.
//   - The oso mode is the connection's enable_out_of_order_snapshots.
//
// Events go out in the domain's order, grouped per stream into batches of
// at most batchBytes (flushed when the domain flushes, so an event never
// waits for a wait of the stream), each batch taking its bytes from the
// connection's flow-control credit first.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"

	"github.com/couchbase/gocbcore/v10/memd"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/changestream"
)

// DCP stream-end reasons (the extras of STREAM_END); memd names the first
// ones only.
const (
	endOK             = 0
	endClosed         = 1
	endStateChanged   = 2
	endDisconnected   = 3
	endTooSlow        = 4
	endBackfillFailed = 5
	endRollback       = 6
	endFilterEmpty    = 7
	endLostPrivileges = 8
)

// Snapshot-marker flags.
const (
	markerMemory = 0x01
	markerDisk   = 0x02
)

// OSO_SNAPSHOT flags.
const (
	osoStart = 0x01
	osoEnd   = 0x02
)

// noEnd is the end_seqno of a stream that never ends.
const noEnd = math.MaxUint64

// batchBytes is the most a stream buffers before it writes.
const batchBytes = 64 << 10

// noTopicID is a topic_id no topic has (ids are random UUIDs): sent for a
// vbuuid that is not the current topic's, so that the domain answers the
// re-created topic's rollback.
const noTopicID = "00000000-0000-0000-0000-000000000000"

var errLostPrivileges = errors.New("READ on the topic was revoked")

type streamKey struct {
	vb  uint16
	sid uint16
}

// dcpStream is one open stream.
type dcpStream struct {
	c      *conn
	key    streamKey
	opaque uint32
	ctl    controls // the connection's controls when the stream was requested
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// closedByClient: CLOSE_STREAM ended it (closeStream sends the end).
	closedByClient bool

	buf    []byte
	inOSO  bool
	events int
	// mayRead re-checks READ (with an enforcing guard) before each batch.
	mayRead func() error
	// encodeErr is an event the wire cannot carry (a key too long).
	encodeErr error
	// cluster: the listener is in cluster mode, where a shutdown of the
	// stream's backend means its partition moves to another instance;
	// moved: the partition moved while the stream ran (cluster.go).
	cluster bool
	moved   atomic.Bool
}

// streamFilter is the JSON value of a stream request.
type streamFilter struct {
	UID         string   `json:"uid"`
	Collections []string `json:"collections"`
	Scope       *string  `json:"scope"`
	SID         *uint16  `json:"sid"`
}

func (c *conn) streamReq(p *packet) error {
	if !c.dcpOpen {
		return c.fail(p, memd.StatusInvalidArgs, "DCP_STREAM_REQ before DCP_OPEN")
	}
	if len(p.extras) != 48 {
		return c.fail(p, memd.StatusInvalidArgs, "DCP_STREAM_REQ needs 48 bytes of extras")
	}
	flags := memd.DcpStreamAddFlag(binary.BigEndian.Uint32(p.extras[0:]))
	start := binary.BigEndian.Uint64(p.extras[8:])
	end := binary.BigEndian.Uint64(p.extras[16:])
	vbuuid := binary.BigEndian.Uint64(p.extras[24:])
	key := streamKey{vb: p.vbucket}
	if len(p.value) > 0 {
		var f streamFilter
		if err := json.Unmarshal(p.value, &f); err != nil {
			return c.fail(p, memd.StatusInvalidArgs, "the stream request's value is not a JSON filter")
		}
		for _, col := range f.Collections {
			if col != "0" {
				return c.fail(p, memd.StatusCollectionUnknown, errorf("collection %s: only the default collection (0) exists", col))
			}
		}
		if f.Scope != nil && *f.Scope != "0" {
			return c.fail(p, memd.StatusScopeUnknown, errorf("scope %s: only the default scope (0) exists", *f.Scope))
		}
		if f.SID != nil {
			key.sid = *f.SID
		}
	}
	if c.ctl.streamIDs != (key.sid != 0) {
		if c.ctl.streamIDs {
			return c.fail(p, memd.StatusDCPStreamIDInvalid, "enable_stream_id is on: the request must name a stream id")
		}
		return c.fail(p, memd.StatusDCPStreamIDInvalid, "a stream id needs enable_stream_id")
	}
	if start > math.MaxInt64 {
		return c.fail(p, memd.StatusRangeError, "start_seqno out of range")
	}
	ctx := c.withPrincipal(c.ctx)
	if err := c.l.cfg.Guard.Require(ctx, authz.Read, authz.Topic, c.bucket); err != nil {
		return c.fail(p, memd.StatusAccessError, "READ on topic "+strconv.Quote(c.bucket)+" is required")
	}
	d, done, err := c.l.domain()
	if err != nil {
		return c.fail(p, memd.StatusTmpFail, err.Error())
	}
	started := false
	defer func() {
		if !started {
			done()
		}
	}()
	t, err := d.Log.DescribeTopic(ctx, c.bucket)
	if err != nil {
		return c.fail(p, statusOf(err), err.Error())
	}
	if int(p.vbucket) >= len(t.Partitions) {
		return c.fail(p, memd.StatusNotMyVBucket, errorf("topic %q has no partition %d", c.bucket, p.vbucket))
	}
	// In cluster mode a vBucket served elsewhere answers NOT_MY_VBUCKET
	// with the current config (cluster.go); one served here is watched,
	// so that its stream ends with "state changed" when it moves.
	var moved <-chan struct{}
	if cl := c.l.cfg.Cluster; cl != nil {
		var ok bool
		if moved, ok = cl.Serve(t.Info.ID, int32(p.vbucket)); !ok || d.Streams == nil {
			return c.out.write(c.notMyVBucket(p, t), false)
		}
	}
	req := changestream.Request{Topic: c.bucket, Partition: int32(p.vbucket), StartOffset: int64(start), OSO: c.ctl.oso}
	if flags&(memd.DcpStreamAddFlagLatest|memd.DcpStreamAddFlagDiskOnly) != 0 {
		end = uint64(t.Partitions[p.vbucket].HighWatermark) // the seqno of the last record now
	}
	if end != noEnd {
		if end < start {
			return c.fail(p, memd.StatusRangeError, errorf("end_seqno %d is below start_seqno %d", end, start))
		}
		e := int64(min(end, math.MaxInt64))
		req.EndOffset = &e
	}
	if start > 0 {
		id := t.Info.ID
		if vbuuid != vbuuidOf(id) {
			id = noTopicID
		}
		req.TopicID = &id
	}

	c.smu.Lock()
	if _, open := c.streams[key]; open {
		c.smu.Unlock()
		return c.fail(p, memd.StatusKeyExists, errorf("a stream of vBucket %d is already open", p.vbucket))
	}
	s := &dcpStream{c: c, key: key, opaque: p.opaque, ctl: c.ctl, done: make(chan struct{}), cluster: c.l.cfg.Cluster != nil}
	s.ctl.collections = c.features[memd.FeatureCollections]
	s.ctx, s.cancel = context.WithCancel(ctx)
	c.streams[key] = s
	c.smu.Unlock()
	if c.l.cfg.Guard.Enforcing() {
		topic := c.bucket
		s.mayRead = func() error { return c.l.cfg.Guard.Require(s.ctx, authz.Read, authz.Topic, topic) }
	}
	reqHdr := *p
	reqHdr.frames, reqHdr.extras, reqHdr.key, reqHdr.value = nil, nil, nil, nil
	xerror := c.features[memd.FeatureXerror] // the stream's goroutine must not read the connection's state
	accepted := false
	req.Started = func() {
		// The answer (the failover log) precedes every event.
		accepted = true
		_ = c.out.write(appendPacket(nil, response(&reqHdr, memd.StatusSuccess), nil, nil, failoverEntries(t.Info.ID)), false)
	}
	c.swg.Add(1)
	started = true
	if moved != nil {
		go func() {
			select {
			case <-moved:
				s.moved.Store(true)
				s.cancel()
			case <-s.ctx.Done():
			}
		}()
	}
	go func() {
		defer c.swg.Done()
		defer close(s.done)
		defer done()
		err := d.Streams.Stream(s.ctx, req, s)
		c.smu.Lock()
		if c.streams[key] == s {
			delete(c.streams, key)
		}
		closed := s.closedByClient
		c.smu.Unlock()
		if err != nil && !s.moved.Load() && s.cluster && !errors.Is(err, errLostPrivileges) && broker.ErrorOf(err) == nil {
			// A failure of the store under a stream whose partition
			// left this instance meanwhile (its backend closing): the
			// partition moved.
			if _, ok := c.l.cfg.Cluster.Serve(t.Info.ID, req.Partition); !ok || (errors.Is(err, context.Canceled) && s.ctx.Err() == nil) {
				// Not served here any more, or the store's own context
				// ended under the stream (not the stream's, not the
				// connection's): the backend is closing, and the
				// partition moves with it.
				s.moved.Store(true)
			}
		}
		if !accepted {
			s.cancel()
			if s.moved.Load() && c.ctx.Err() == nil {
				// Moved before it started: the client asks the new owner.
				_ = c.out.write(failure(&reqHdr, memd.StatusNotMyVBucket, "the partition moved to another instance", xerror), false)
			} else if err != nil && c.ctx.Err() == nil {
				c.l.logger.Debug("dcp stream refused", "topic", req.Topic, "vb", key.vb, "err", err)
				_ = c.out.write(refusal(&reqHdr, err, xerror), false)
			}
			return
		}
		s.cancel()
		if err == nil || closed || c.ctx.Err() != nil {
			return // stream_end sent, or the client closed it, or the connection is gone
		}
		if s.moved.Load() {
			// The partition moved to another instance: the client resumes
			// there with its seqno and vbuuid.
			c.l.logger.Debug("dcp stream ended: the partition moved", "topic", req.Topic, "vb", key.vb)
			s.buf = s.buf[:0]
			s.appendEnd(endStateChanged)
			_ = c.out.write(s.buf, false)
			return
		}
		reason := uint32(endBackfillFailed)
		if errors.Is(err, errLostPrivileges) {
			reason = endLostPrivileges
		}
		c.l.logger.Info("dcp stream ended", "topic", req.Topic, "vb", key.vb, "err", err)
		s.buf = s.buf[:0]
		s.appendEnd(reason)
		_ = c.out.write(s.buf, false)
	}()
	return nil
}

// refusal is the answer to a stream request the domain refused before
// any event.
func refusal(p *packet, err error, xerror bool) []byte {
	ae := broker.ErrorOf(err)
	if ae != nil && ae.Reason == apierr.RollbackRequired {
		to, _ := strconv.ParseUint(ae.Metadata["rollback_offset"], 10, 64)
		// rollback_offset is the first offset to read again (always 0):
		// the client rolls back to the seqno before it, i.e. to it.
		return appendPacket(nil, response(p, memd.StatusRollback), nil, nil, binary.BigEndian.AppendUint64(nil, to))
	}
	return failure(p, statusOf(err), err.Error(), xerror)
}

// statusOf maps a domain error to a memcached status.
func statusOf(err error) memd.StatusCode {
	ae := broker.ErrorOf(err)
	if ae == nil {
		return memd.StatusInternalError
	}
	switch ae.Reason {
	case apierr.UnknownTopicOrPartition:
		return memd.StatusNotMyVBucket
	case apierr.OffsetOutOfRange:
		return memd.StatusRangeError
	case apierr.InvalidRequest:
		return memd.StatusInvalidArgs
	case apierr.TopicAuthorizationFailed:
		return memd.StatusAccessError
	case apierr.ThrottlingQuotaExceeded, apierr.Unavailable:
		return memd.StatusTmpFail
	}
	return memd.StatusInternalError
}

// closeStream answers CLOSE_STREAM: the stream stops at its next event
// boundary; with send_stream_end_on_client_close_stream a STREAM_END
// (closed) follows the answer.
func (c *conn) closeStream(p *packet) error {
	key := streamKey{vb: p.vbucket}
	if sid, ok := p.streamID(); ok {
		key.sid = sid
	}
	c.smu.Lock()
	s := c.streams[key]
	if s != nil {
		delete(c.streams, key)
		s.closedByClient = true
	}
	c.smu.Unlock()
	if s == nil {
		return c.fail(p, memd.StatusKeyNotFound, errorf("no stream of vBucket %d is open", p.vbucket))
	}
	s.cancel()
	<-s.done // a stream waiting for flow-control credit sees its context end
	if err := c.reply(p, memd.StatusSuccess, nil, nil, nil); err != nil {
		return err
	}
	if !s.ctl.endOnClose {
		return nil
	}
	s.buf = s.buf[:0]
	s.appendEnd(endClosed)
	return c.out.write(s.buf, false)
}

// hdr is the header of one of the stream's messages.
func (s *dcpStream) hdr(op memd.CmdCode) header {
	return header{magic: magicReq, opcode: op, vbucket: s.key.vb, opaque: s.opaque, sid: s.key.sid, hasSID: s.ctl.streamIDs}
}

// Send implements changestream.Sender: it encodes ev into the batch.
func (s *dcpStream) Send(ev *changestream.Event) error {
	switch ev.Kind {
	case changestream.EventMarker:
		flags := uint32(markerDisk)
		if ev.Source == changestream.SourceMemory {
			flags = markerMemory
		}
		s.buf = appendHeader(s.buf, s.hdr(memd.CmdDcpSnapshotMarker), 20, 0, 0)
		s.buf = binary.BigEndian.AppendUint64(s.buf, uint64(ev.Start)+1)
		s.buf = binary.BigEndian.AppendUint64(s.buf, uint64(ev.End)+1)
		s.buf = binary.BigEndian.AppendUint32(s.buf, flags)
	case changestream.EventOSOStart, changestream.EventOSOEnd:
		flags := uint32(osoStart)
		s.inOSO = ev.Kind == changestream.EventOSOStart
		if !s.inOSO {
			flags = osoEnd
		}
		s.buf = appendOSO(s.buf, s.hdr(memd.CmdDcpOsoSnapshot), flags)
	case changestream.EventMutation, changestream.EventDeletion:
		if err := s.appendRecord(ev); err != nil {
			s.encodeErr = err
			return err
		}
	case changestream.EventOffsetAdvanced:
		if s.inOSO || s.ctl.seqnoAdvanced {
			s.buf = appendHeader(s.buf, s.hdr(memd.CmdDcpSeqNoAdvanced), 8, 0, 0)
			s.buf = binary.BigEndian.AppendUint64(s.buf, uint64(ev.Offset)+1)
		}
		// Otherwise the client did not ask for SEQNO_ADVANCED: the
		// snapshot marker's end already told it the range.
	case changestream.EventEnd:
		s.appendEnd(endReason(ev.Reason, s.cluster))
	default:
		return fmt.Errorf("dcp: unknown change event %d", ev.Kind)
	}
	s.events++
	if len(s.buf) >= batchBytes {
		return s.Flush()
	}
	return nil
}

// appendOSO appends an OSO_SNAPSHOT message: no key, no value, 4 bytes of
// extras holding the flags (docs/dcp.md has the byte layout).
func appendOSO(out []byte, h header, flags uint32) []byte {
	out = appendHeader(out, h, 4, 0, 0)
	return binary.BigEndian.AppendUint32(out, flags)
}

// endReason is the STREAM_END reason of a change stream's end. In cluster
// mode a shutdown (this instance stops, or stops being the active one)
// hands the partition to another instance: "state changed", as a
// Couchbase node answers for a vBucket that stopped being active there.
func endReason(r changestream.EndReason, cluster bool) uint32 {
	switch r {
	case changestream.EndOK:
		return endOK
	case changestream.EndRollback:
		return endRollback
	case changestream.EndTopicDeleted:
		return endStateChanged
	case changestream.EndShutdown:
		if cluster {
			return endStateChanged
		}
		return endDisconnected
	}
	return endBackfillFailed
}

func (s *dcpStream) appendEnd(reason uint32) {
	s.buf = appendHeader(s.buf, s.hdr(memd.CmdDcpStreamEnd), 4, 0, 0)
	s.buf = binary.BigEndian.AppendUint32(s.buf, reason)
}

// appendRecord appends a MUTATION (31 bytes of extras: by seqno, rev
// seqno 1, flags 0, expiry 0, lock time 0, no extended metadata, nru 0)
// or a DELETION (18 bytes: by seqno, rev seqno 1, no extended metadata;
// with the delete-times open flag 21: by seqno, rev seqno, delete time,
// 0), the CAS being the record's timestamp in nanoseconds.
func (s *dcpStream) appendRecord(ev *changestream.Event) error {
	r := ev.Record
	maxKey := math.MaxUint16
	if s.ctl.streamIDs {
		maxKey = math.MaxUint8
	}
	var cid []byte
	if s.ctl.collections {
		cid = []byte{0} // LEB128 of the default collection's id
	}
	if len(cid)+len(r.Key) > maxKey {
		return fmt.Errorf("the key at offset %d is %d bytes, more than a DCP message carries (%d)", r.Offset, len(r.Key), maxKey)
	}
	keyLen := len(cid) + len(r.Key)
	h := s.hdr(memd.CmdDcpMutation)
	h.cas = uint64(r.Timestamp) * 1e6
	seqno := uint64(r.Offset) + 1
	if ev.Kind == changestream.EventMutation {
		value := r.Value
		if s.ctl.openFlags&memd.DcpOpenFlagNoValue != 0 {
			value = nil
		}
		s.buf = appendHeader(s.buf, h, 31, keyLen, len(value))
		s.buf = binary.BigEndian.AppendUint64(s.buf, seqno)
		s.buf = binary.BigEndian.AppendUint64(s.buf, 1)
		s.buf = append(s.buf, make([]byte, 15)...) // flags, expiry, lock time, nmeta, nru
		s.buf = append(s.buf, cid...)
		s.buf = append(s.buf, r.Key...)
		s.buf = append(s.buf, value...)
		return nil
	}
	h.opcode = memd.CmdDcpDeletion
	if s.ctl.openFlags&memd.DcpOpenFlagIncludeDeleteTimes != 0 {
		s.buf = appendHeader(s.buf, h, 21, keyLen, 0)
		s.buf = binary.BigEndian.AppendUint64(s.buf, seqno)
		s.buf = binary.BigEndian.AppendUint64(s.buf, 1)
		s.buf = binary.BigEndian.AppendUint32(s.buf, uint32(r.Timestamp/1000))
		s.buf = append(s.buf, 0)
	} else {
		s.buf = appendHeader(s.buf, h, 18, keyLen, 0)
		s.buf = binary.BigEndian.AppendUint64(s.buf, seqno)
		s.buf = binary.BigEndian.AppendUint64(s.buf, 1)
		s.buf = append(s.buf, 0, 0)
	}
	s.buf = append(s.buf, cid...)
	s.buf = append(s.buf, r.Key...)
	return nil
}

// Flush implements changestream.Sender: it re-checks READ, takes the
// batch's flow-control credit and writes it.
func (s *dcpStream) Flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	if s.mayRead != nil {
		if err := s.mayRead(); err != nil {
			s.buf = s.buf[:0] // the events held are not sent
			return errLostPrivileges
		}
	}
	if f := s.ctl.flow; f != nil && !f.take(int64(len(s.buf)), s.ctx.Done()) {
		return s.ctx.Err()
	}
	err := s.c.out.write(s.buf, false)
	s.buf = s.buf[:0]
	if cap(s.buf) > 4*batchBytes {
		s.buf = nil // do not keep one large record's buffer
	}
	return err
}
