package kafkawire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/sharegroup"
	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// errorCode answers the domain's reason as its Kafka code (the sentinels
// as broker.ErrorOf names them) and the listener's codec errors as theirs;
// the share-group calls answer as coordinators for UNAVAILABLE and
// NOT_OWNER.
func TestErrorCodes(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		code      *kerr.Error // nil = NONE
		groupCode *kerr.Error // the share-group calls' answer where it differs
	}{
		{"nil", nil, nil, nil},
		{"unknown topic", fmt.Errorf("t: %w", logstore.ErrUnknownTopic), kerr.UnknownTopicOrPartition, nil},
		{"topic exists", logstore.ErrTopicExists, kerr.TopicAlreadyExists, nil},
		{"offset out of range", logstore.ErrOffsetOutOfRange, kerr.OffsetOutOfRange, nil},
		{"invalid argument", logstore.ErrInvalidArgument, kerr.InvalidRequest, nil},
		{"corrupt", logstore.ErrCorrupt, kerr.CorruptMessage, nil},
		{"storage", fmt.Errorf("/data: %w", logstore.ErrStorage), kerr.KafkaStorageError, nil},
		{"offline", logstore.ErrOffline, kerr.KafkaStorageError, nil},
		// Shutting down is UNAVAILABLE on every transport (it was
		// KAFKA_STORAGE_ERROR here).
		{"store closed", logstore.ErrClosed, kerr.NotLeaderForPartition, kerr.CoordinatorNotAvailable},
		{"share groups closed", sharegroup.ErrClosed, kerr.NotLeaderForPartition, kerr.CoordinatorNotAvailable},
		{"fenced append", fmt.Errorf("append: %w", sljs.ErrFenced), kerr.NotLeaderForPartition, kerr.NotCoordinator},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), kerr.RequestTimedOut, nil},
		{"cancelled", context.Canceled, kerr.RequestTimedOut, nil},
		{"record too large", fmt.Errorf("p0: %w", errRecordTooLarge), kerr.MessageTooLarge, nil},
		{"corrupt batch", fmt.Errorf("%w: CRC-32C mismatch", errCorruptBatch), kerr.CorruptMessage, nil},
		{"invalid record", errInvalidRecord, kerr.InvalidRecord, nil},
		{"unsupported codec", errUnsupportedCodec, kerr.UnsupportedCompressionType, nil},
		{"domain error", fmt.Errorf("x: %w", apierr.New(apierr.FencedMemberEpoch, "epoch")), kerr.FencedMemberEpoch, nil},
		{"not owner", apierr.New(apierr.NotOwner, "elsewhere"), kerr.NotLeaderForPartition, kerr.NotCoordinator},
		{"unavailable", apierr.New(apierr.Unavailable, "bye"), kerr.NotLeaderForPartition, kerr.CoordinatorNotAvailable},
		{"rollback required", apierr.New(apierr.RollbackRequired, "reset"), kerr.OffsetOutOfRange, nil},
		{"topic authorization", apierr.New(apierr.TopicAuthorizationFailed, "no"), kerr.TopicAuthorizationFailed, nil},
		{"unauthenticated", apierr.New(apierr.Unauthenticated, "who"), kerr.SaslAuthenticationFailed, nil},
		{"unknown reason", apierr.New("MADE_UP", "x"), kerr.UnknownServerError, nil},
		{"no reason is never NONE", &apierr.Error{Message: "x"}, kerr.UnknownServerError, nil},
		{"unexpected", errors.New("boom"), kerr.UnknownServerError, nil},
	}
	code := func(e *kerr.Error) int16 {
		if e == nil {
			return 0
		}
		return e.Code
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorCode(tt.err); got != code(tt.code) {
				t.Errorf("errorCode: %v, want %v", kerr.ErrorForCode(got), tt.code)
			}
			want := tt.groupCode
			if want == nil {
				want = tt.code
			}
			if got := groupErrorCode(tt.err); got != code(want) {
				t.Errorf("groupErrorCode: %v, want %v", kerr.ErrorForCode(got), want)
			}
		})
	}
}

// Every reason answers its apierr Kafka code, and a reason named after a
// Kafka error has that error's number as franz-go knows it.
func TestReasonsAnswerTheirKafkaCodes(t *testing.T) {
	for _, r := range apierr.Reasons() {
		got := errorCode(apierr.New(r, "x"))
		if got != r.KafkaCode() {
			t.Errorf("%s: code %d, want %d", r, got, r.KafkaCode())
		}
		if ke, ok := kerr.ErrorForCode(got).(*kerr.Error); ok && ke.Message != string(r) {
			// Allowed only for the reasons without a Kafka name.
			switch r {
			case apierr.Unavailable, apierr.NotOwner, apierr.OwnerUnreachable, apierr.OutcomeUnknown, apierr.Internal,
				apierr.Unauthenticated, apierr.RollbackRequired:
			default:
				t.Errorf("%s answers %s", r, ke.Message)
			}
		}
	}
}

// rawConn is a hand-driven Kafka connection.
type rawConn struct {
	t  *testing.T
	nc net.Conn
}

func (f *fixture) dial() *rawConn {
	f.t.Helper()
	nc, err := net.Dial("tcp", f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: f.t, nc: nc}
}

// send writes req (its version set) with correlation id 7.
func (c *rawConn) send(req kmsg.Request) {
	c.t.Helper()
	b := kbin.AppendInt16(nil, req.Key())
	b = kbin.AppendInt16(b, req.GetVersion())
	b = kbin.AppendInt32(b, 7)
	b = kbin.AppendNullableString(b, nil)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	c.sendRaw(b)
}

func (c *rawConn) sendRaw(body []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(binary.BigEndian.AppendUint32(nil, uint32(len(body)))); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.nc.Write(body); err != nil {
		c.t.Fatal(err)
	}
}

// recv reads one response into resp (version set), checking correlation 7.
func (c *rawConn) recv(resp kmsg.Response) {
	c.t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		c.t.Fatal(err)
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.nc, b); err != nil {
		c.t.Fatal(err)
	}
	if corr := int32(binary.BigEndian.Uint32(b)); corr != 7 {
		c.t.Fatalf("correlation id %d", corr)
	}
	b = b[4:]
	if resp.IsFlexible() && resp.Key() != apiVersionsKey {
		b = b[1:]
	}
	if err := resp.ReadFrom(b); err != nil {
		c.t.Fatal(err)
	}
}

// closed asserts the server closed the connection.
func (c *rawConn) closed() {
	c.t.Helper()
	var b [1]byte
	if _, err := c.nc.Read(b[:]); !errors.Is(err, io.EOF) {
		c.t.Fatalf("connection not closed by the server: %v", err)
	}
}

func TestAPIVersionsFallbackAndTable(t *testing.T) {
	f := newFixture(t)
	c := f.dial()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(5) // above our maximum
	c.send(req)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	c.recv(resp)
	if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) != 1 || resp.ApiKeys[0].ApiKey != 18 || resp.ApiKeys[0].MaxVersion != 3 {
		t.Fatalf("fallback response %+v", resp)
	}
	req.SetVersion(3)
	sw, swv := "test", "1"
	req.ClientSoftwareName, req.ClientSoftwareVersion = sw, swv
	c.send(req)
	resp = kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(3)
	c.recv(resp)
	got := map[int16][2]int16{}
	for _, k := range resp.ApiKeys {
		got[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	for k, h := range f.l.handlers {
		if got[k] != [2]int16{h.min, h.max} {
			t.Fatalf("key %d advertised %v, handler table %d..%d", k, got[k], h.min, h.max)
		}
	}
	if len(got) != len(f.l.handlers) {
		t.Fatalf("advertised %d keys, handler table has %d", len(got), len(f.l.handlers))
	}
}

func TestUnsupportedVersionAndUnknownKeyClose(t *testing.T) {
	f := newFixture(t)
	c := f.dial()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(2) // below the floor
	c.send(req)
	c.closed()

	c = f.dial()
	c.sendRaw([]byte{0x7f, 0x00, 0, 0, 0, 0, 0, 7, 0xff, 0xff}) // key 32512
	c.closed()
}

func TestOversizedFrameClosesOnlyThatConnection(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxRequestBytes = 4096 })
	other := f.dial()
	c := f.dial()
	// A lying length: far beyond the cap, with few bytes behind it.
	if _, err := c.nc.Write([]byte{0x7f, 0xff, 0xff, 0xff, 0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	c.closed()
	// The other connection still works.
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	other.send(req)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	other.recv(resp)
	if resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		t.Fatalf("other connection: %+v", resp)
	}
}

// produceRequest builds a v9 produce of raw batch bytes to t/0.
func produceRequest(topic string, raw []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = raw
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func TestProduceBadBatchesAppendNothing(t *testing.T) {
	f := newFixture(t)
	f.createTopic("t", 1)
	good := appendBatch(nil, []logstore.Record{{Offset: 0, Timestamp: 1, Value: []byte("a")}, {Offset: 1, Timestamp: 2, Value: []byte("b")}})
	badCRC := append([]byte(nil), good...)
	badCRC[len(badCRC)-1] ^= 1
	badMagic := append([]byte(nil), good...)
	badMagic[16] = 1
	control := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(control[21:], attrControl)
	fixCRC(control)
	badCodec := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(badCodec[21:], 5)
	fixCRC(badCodec)
	badCount := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(badCount[57:], 3)
	fixCRC(badCount)
	cases := []struct {
		name string
		raw  []byte
		want *kerr.Error
	}{
		{"bad crc", badCRC, kerr.CorruptMessage},
		{"magic 1", badMagic, kerr.CorruptMessage},
		{"control batch", control, kerr.InvalidRecord},
		{"codec 5", badCodec, kerr.UnsupportedCompressionType},
		{"record count", badCount, kerr.InvalidRecord},
		{"truncated", good[:len(good)-3], kerr.CorruptMessage},
		{"good then bad", append(append([]byte(nil), good...), badCRC...), kerr.CorruptMessage},
	}
	cl := f.client()
	for _, tc := range cases {
		resp, err := produceRequest("t", tc.raw).RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != tc.want.Code {
			t.Fatalf("%s: error %v, want %v", tc.name, kerr.ErrorForCode(code), tc.want)
		}
	}
	if _, hw, _ := f.store.Bounds("t", 0); hw != 0 {
		t.Fatalf("bad batches appended: high watermark %d", hw)
	}
	resp, err := produceRequest("nope", good).RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %v", kerr.ErrorForCode(code))
	}
	resp, err = produceRequest("t", good).RequestWith(testCtx(t), cl)
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 || resp.Topics[0].Partitions[0].BaseOffset != 0 {
		t.Fatalf("good batch: %v %+v", err, resp)
	}
}

func fixCRC(b []byte) {
	binary.BigEndian.PutUint32(b[17:], crc32Checksum(b[batchCRCStart:]))
}

func TestUnknownTopicIDInMetadata(t *testing.T) {
	f := newFixture(t)
	f.createTopic("t", 1)
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(12)
	req.Topics = []kmsg.MetadataRequestTopic{{TopicID: [16]byte{1, 2, 3}}}
	resp, err := req.RequestWith(testCtx(t), f.client())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Topics[0].ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("unknown topic id: %v", kerr.ErrorForCode(resp.Topics[0].ErrorCode))
	}
	info, _ := f.store.TopicInfo(testCtx(t), "t")
	req.Topics = []kmsg.MetadataRequestTopic{{TopicID: topicID(info.ID)}}
	resp, err = req.RequestWith(testCtx(t), f.client())
	if err != nil {
		t.Fatal(err)
	}
	if rt := resp.Topics[0]; rt.ErrorCode != 0 || rt.Topic == nil || *rt.Topic != "t" || len(rt.Partitions) != 1 {
		t.Fatalf("known topic id: %+v", rt)
	}
	if resp.ClusterID == nil || *resp.ClusterID != f.l.clusterID || len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != 0 {
		t.Fatalf("cluster: %+v", resp)
	}
}

func TestClusterIDPersists(t *testing.T) {
	dir := t.TempDir()
	a, err := loadClusterID(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := loadClusterID(dir)
	if err != nil || a != b || a == "" {
		t.Fatalf("cluster id %q then %q (%v)", a, b, err)
	}
}
