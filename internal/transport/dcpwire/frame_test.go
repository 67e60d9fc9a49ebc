package dcpwire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/couchbase/gocbcore/v10/memd"
	"github.com/couchbase/gomemcached"

	"github.com/sharelog/sharelog/internal/changestream"
)

// seedOSOStart is the OSO_SNAPSHOT start message of the user's seed
// (docs/dcp.md "OSO_SNAPSHOT"), field by field as its table gives it:
// magic 0x80, opcode 0x65, key length 0, extras length 4, data type 0,
// vbucket 0, total body 4, opaque 0xdeadbeef, CAS 0, flags 0x00000001.
// (The seed's byte diagram shows 0x00 at offset 11, which contradicts its
// own table, "Total body (8-11): 0x00000004", and the 4 bytes of extras
// the body carries; the table is followed.)
var seedOSOStart = []byte{
	0x80, 0x65, 0x00, 0x00,
	0x04, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x04,
	0xde, 0xad, 0xbe, 0xef,
	0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x01,
}

// TestOSOSnapshotFrameMatchesSeed: a stream of vBucket 0 whose opaque is
// 0xdeadbeef encodes the domain's oso(START) exactly as the seed's
// example, and both Couchbase Go clients' decoders read it as the start.
func TestOSOSnapshotFrameMatchesSeed(t *testing.T) {
	s := &dcpStream{key: streamKey{vb: 0}, opaque: 0xdeadbeef}
	if err := s.Send(&changestream.Event{Kind: changestream.EventOSOStart}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.buf, seedOSOStart) {
		t.Fatalf("OSO start frame\n got % x\nwant % x", s.buf, seedOSOStart)
	}

	pkt, n, err := memd.NewConn(bytes.NewBuffer(bytes.Clone(s.buf))).ReadPacket()
	if err != nil {
		t.Fatal(err)
	}
	if n != len(seedOSOStart) || pkt.Command != memd.CmdDcpOsoSnapshot || pkt.Opaque != 0xdeadbeef ||
		binary.BigEndian.Uint32(pkt.Extras) != 1 || len(pkt.Key) != 0 || len(pkt.Value) != 0 {
		t.Fatalf("gocbcore's memd reads %d bytes: %+v", n, pkt)
	}
	var req gomemcached.MCRequest
	if _, err := req.Receive(bytes.NewReader(s.buf), nil); err != nil {
		t.Fatal(err)
	}
	if req.Opcode != gomemcached.DCP_OSO_SNAPSHOT || req.Opaque != 0xdeadbeef || binary.BigEndian.Uint32(req.Extras) != 1 {
		t.Fatalf("gomemcached reads %+v", req)
	}

	s.buf = s.buf[:0]
	if err := s.Send(&changestream.Event{Kind: changestream.EventOSOEnd}); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(seedOSOStart)
	want[27] = 0x02 // end
	if !bytes.Equal(s.buf, want) {
		t.Fatalf("OSO end frame\n got % x\nwant % x", s.buf, want)
	}
}

// request encodes a request packet.
func request(op memd.CmdCode, vb uint16, opaque uint32, extras, key, value []byte) []byte {
	return appendPacket(nil, header{magic: magicReq, opcode: op, vbucket: vb, opaque: opaque}, extras, key, value)
}

func TestReadPacket(t *testing.T) {
	streamReq := request(memd.CmdDcpStreamReq, 3, 42, make([]byte, 48), nil, []byte(`{"sid":7}`))
	withSID := appendPacket(nil, header{magic: magicReq, opcode: memd.CmdDcpCloseStream, vbucket: 3, opaque: 43, sid: 7, hasSID: true}, nil, nil, nil)
	in := append(append([]byte(nil), streamReq...), withSID...)
	r := bufio.NewReader(bytes.NewReader(in))
	p, buf, err := readPacket(r, nil, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if p.opcode != memd.CmdDcpStreamReq || p.vbucket != 3 || p.opaque != 42 || len(p.extras) != 48 || string(p.value) != `{"sid":7}` {
		t.Fatalf("stream request read as %+v", p)
	}
	p, _, err = readPacket(r, buf, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if sid, ok := p.streamID(); !ok || sid != 7 || p.magic != magicAltReq || p.opcode != memd.CmdDcpCloseStream {
		t.Fatalf("close stream read as %+v (sid %d %v)", p, sid, ok)
	}
	if _, _, err := readPacket(r, buf, 1<<10); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %v", err)
	}

	for name, bad := range map[string][]byte{
		"over the limit": request(memd.CmdHello, 0, 1, nil, nil, make([]byte, 2000)),
		"unknown magic":  append([]byte{0x42}, request(memd.CmdNoop, 0, 1, nil, nil, nil)[1:]...),
		"lengths beyond the body": func() []byte {
			b := request(memd.CmdSASLAuth, 0, 1, nil, []byte("PLAIN"), nil)
			binary.BigEndian.PutUint16(b[2:], 300) // key length 300 in a body of 5
			return b
		}(),
		"truncated body": request(memd.CmdHello, 0, 1, nil, nil, []byte("abcdef"))[:27],
		"bad frame info": func() []byte {
			b := appendPacket(nil, header{magic: magicReq, opcode: memd.CmdNoop, sid: 1, hasSID: true}, nil, nil, nil)
			b[24] = 0x2f // a frame claiming 15+ bytes with nothing after it
			return b
		}(),
	} {
		if _, _, err := readPacket(bufio.NewReader(bytes.NewReader(bad)), nil, 1<<10); !errors.Is(err, errFrame) {
			t.Errorf("%s: want errFrame, got %v", name, err)
		}
	}
}

// FuzzReadPacket feeds arbitrary bytes to the packet reader: no panic, no
// buffer beyond the limit, the parts of an accepted packet adding up to
// its body, and gocbcore's memd reader agreeing on every packet accepted.
func FuzzReadPacket(f *testing.F) {
	const limit = 1 << 12
	f.Add(request(memd.CmdHello, 0, 1, nil, []byte("agent"), []byte{0, 7, 0, 8, 0, 0x0b}))
	f.Add(request(memd.CmdDcpStreamReq, 3, 42, make([]byte, 48), nil, []byte(`{"collections":["0"]}`)))
	f.Add(appendPacket(nil, header{magic: magicReq, opcode: memd.CmdDcpCloseStream, vbucket: 3, sid: 7, hasSID: true}, nil, nil, nil))
	f.Add(seedOSOStart)
	f.Add(append(request(memd.CmdDcpBufferAck, 0, 0, []byte{0, 0, 1, 0}, nil, nil), request(memd.CmdNoop, 0, 2, nil, nil, nil)...))
	f.Add([]byte{0x08, 0x53, 0xff, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff})
	f.Add([]byte{0x80, 0x1f, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		var buf []byte
		for {
			p, b, err := readPacket(r, buf, limit)
			buf = b
			if cap(buf) > limit {
				t.Fatalf("buffer of %d bytes over the limit %d", cap(buf), limit)
			}
			if err != nil {
				return
			}
			p.streamID()
			total := len(p.frames) + len(p.extras) + len(p.key) + len(p.value)
			raw := appendHeaderRaw(p, total)
			mp, n, merr := memd.NewConn(bytes.NewBuffer(append(raw, joinBody(p)...))).ReadPacket()
			if merr != nil {
				if p.magic == magicReq || p.magic == magicRes {
					t.Fatalf("memd refuses a packet this reader accepted: %v", merr)
				}
				continue // memd knows fewer frame infos and magics by name; not a disagreement of lengths
			}
			if n != headerLen+total || !bytes.Equal(mp.Extras, p.extras) || !bytes.Equal(mp.Key, p.key) || !bytes.Equal(mp.Value, p.value) {
				t.Fatalf("memd reads %d bytes extras % x key % x value % x; this reader extras % x key % x value % x",
					n, mp.Extras, mp.Key, mp.Value, p.extras, p.key, p.value)
			}
		}
	})
}

// appendHeaderRaw re-encodes p's header with its own lengths.
func appendHeaderRaw(p packet, total int) []byte {
	out := []byte{p.magic, byte(p.opcode)}
	if p.magic == magicAltReq || p.magic == magicAltRes {
		out = append(out, byte(len(p.frames)), byte(len(p.key)))
	} else {
		out = binary.BigEndian.AppendUint16(out, uint16(len(p.key)))
	}
	out = append(out, byte(len(p.extras)), p.datatype)
	out = binary.BigEndian.AppendUint16(out, p.vbucket)
	out = binary.BigEndian.AppendUint32(out, uint32(total))
	out = binary.BigEndian.AppendUint32(out, p.opaque)
	return binary.BigEndian.AppendUint64(out, p.cas)
}

func joinBody(p packet) []byte {
	var b []byte
	for _, part := range [][]byte{p.frames, p.extras, p.key, p.value} {
		b = append(b, part...)
	}
	return b
}
