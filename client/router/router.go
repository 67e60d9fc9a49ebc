// Package router is a grpc.ClientConnInterface that sends each sharelog
// call straight to the instance that owns what it is about, as
// LogService.DescribeCluster names it, instead of to one instance that
// forwards it (one hop more). Hand a Conn to the generated clients,
// client/changestream or client/shareconsumer in place of a
// *grpc.ClientConn.
//
// # Which instance a call goes to
//
//   - When one instance owns every partition and group (file mode, and the
//     active instance of the active-standby mode), every call goes to it.
//   - Otherwise ShareFetch and ShareAcknowledge go to the owner of the
//     first partition they name (the instance serving its
//     share-partitions, where the share session lives; the seed when they
//     name none), any other request naming a share group (its group_id)
//     to the group's coordinator, a request with a topic and a partition
//     to that partition's owner, and any other call to the seed
//     connection, whose instance forwards it.
//   - When the view cannot be read (an older server, an error), when the
//     owner is unknown, or when dialling the owner fails, the call goes to
//     the seed connection: routing never makes a call fail that the seed
//     would have served.
//
// The view is read on first use and again after Options.Refresh (after
// Options.RetryFailed when it could not be read, as while an instance takes
// over), and at once after a routed call fails with UNAVAILABLE (NOT_OWNER,
// OWNER_UNREACHABLE, or a transport failure) or a ShareFetch answers a
// partition NOT_LEADER_OR_FOLLOWER: ownership moved. The failed call itself
// is not retried (a produce may not be safe to resend); the caller's own
// retry goes to the new owner.
package router

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// Dialer opens a connection to an instance's advertised gRPC address, with
// the same credentials as the seed connection.
type Dialer func(addr string) (grpc.ClientConnInterface, error)

// Options configures a Conn.
type Options struct {
	// Refresh is how long a view is used before it is read again
	// (default 30 s).
	Refresh time.Duration
	// Timeout bounds one DescribeCluster call (default 5 s).
	Timeout time.Duration
	// RetryFailed is how long after a failed DescribeCluster the view is
	// read again (default 1 s; meanwhile the seed serves every call).
	RetryFailed time.Duration
}

// Conn routes calls by the cluster view. It is safe for concurrent use.
type Conn struct {
	seed grpc.ClientConnInterface
	dial Dialer
	o    Options

	mu      sync.Mutex
	view    *sharelogv1.DescribeClusterResponse
	readAt  time.Time
	stale   bool
	conns   map[string]grpc.ClientConnInterface
	closers []io.Closer
}

// New returns a Conn that reads the view through seed and reaches the
// owners through dial.
func New(seed grpc.ClientConnInterface, dial Dialer, o Options) *Conn {
	if o.Refresh <= 0 {
		o.Refresh = 30 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.RetryFailed <= 0 {
		o.RetryFailed = time.Second
	}
	return &Conn{seed: seed, dial: dial, o: o, conns: map[string]grpc.ClientConnInterface{}}
}

// Close closes the connections the Conn dialled (not the seed).
func (c *Conn) Close() error {
	c.mu.Lock()
	closers := c.closers
	c.closers, c.conns = nil, map[string]grpc.ClientConnInterface{}
	c.mu.Unlock()
	var errs []error
	for _, cl := range closers {
		errs = append(errs, cl.Close())
	}
	return errors.Join(errs...)
}

// Dial returns the Conn's connection to the instance at addr (an
// advertised gRPC address of DescribeCluster), dialling it with the
// Conn's Dialer on first use; Close closes it. It lets a client that must
// reach one given instance itself share the Conn's connections:
// client/shareconsumer keeps a share session on each partition owner.
func (c *Conn) Dial(addr string) (grpc.ClientConnInterface, error) {
	return c.connTo(addr)
}

// Invalidate makes the next call read the view again.
func (c *Conn) Invalidate() {
	c.mu.Lock()
	c.stale = true
	c.mu.Unlock()
}

// Invoke sends a unary call to the owner of what args is about.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	target, routed := c.target(ctx, method, args)
	err := target.Invoke(ctx, method, args, reply, opts...)
	c.check(routed, err)
	if err == nil && routed {
		if r, ok := reply.(*sharelogv1.ShareFetchResponse); ok && movedInFetch(r) {
			c.Invalidate()
		}
	}
	return err
}

// NewStream opens a stream to the owner of what its first request is
// about: the stream is opened at the first SendMsg (sharelog's streams are
// server-streaming: one request, then responses).
func (c *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if desc.ClientStreams {
		return c.seed.NewStream(ctx, desc, method, opts...)
	}
	return &lazyStream{c: c, ctx: ctx, desc: desc, method: method, opts: opts}, nil
}

// target is the connection for one call, and whether it is not the seed.
func (c *Conn) target(ctx context.Context, method string, args any) (grpc.ClientConnInterface, bool) {
	if method == sharelogv1.LogService_DescribeCluster_FullMethodName {
		return c.seed, false
	}
	view := c.current(ctx)
	if view == nil {
		return c.seed, false
	}
	addr := ownerAddr(view, args)
	if addr == "" {
		return c.seed, false
	}
	cc, err := c.connTo(addr)
	if err != nil {
		return c.seed, false
	}
	return cc, true
}

// current is the view, read again when stale or old (nil when it cannot
// be read).
func (c *Conn) current(ctx context.Context) *sharelogv1.DescribeClusterResponse {
	c.mu.Lock()
	valid := c.o.Refresh
	if c.view == nil {
		valid = c.o.RetryFailed
	}
	if !c.stale && !c.readAt.IsZero() && time.Since(c.readAt) < valid {
		v := c.view
		c.mu.Unlock()
		return v
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.Timeout)
	defer cancel()
	v, err := sharelogv1.NewLogServiceClient(c.seed).DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
	if err != nil {
		v = nil // the seed serves meanwhile; try again after RetryFailed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.view, c.readAt, c.stale = v, time.Now(), false
	return v
}

func (c *Conn) connTo(addr string) (grpc.ClientConnInterface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc := c.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := c.dial(addr)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	if cl, ok := cc.(io.Closer); ok {
		c.closers = append(c.closers, cl)
	}
	return cc, nil
}

// check invalidates the view when a routed call's error says ownership
// moved or the owner is not reachable.
func (c *Conn) check(routed bool, err error) {
	if !routed || err == nil {
		return
	}
	// NOT_OWNER and OWNER_UNREACHABLE are UNAVAILABLE (docs/errors.md); a
	// partition that moved is a per-partition code (movedInFetch), never a
	// request-level reason.
	if status.Code(err) == codes.Unavailable {
		c.Invalidate()
	}
}

// movedInFetch reports a partition of a ShareFetch answered
// NOT_LEADER_OR_FOLLOWER.
func movedInFetch(r *sharelogv1.ShareFetchResponse) bool {
	for _, t := range r.GetResponses() {
		for _, p := range t.GetPartitions() {
			if p.GetErrorCode() == sharelogv1.ErrorCode_ERROR_CODE_NOT_LEADER_OR_FOLLOWER {
				return true
			}
		}
	}
	return false
}

// ownerAddr is the gRPC address a request should go to, "" for the seed.
func ownerAddr(view *sharelogv1.DescribeClusterResponse, args any) string {
	addrs := make(map[string]string, len(view.GetInstances()))
	for _, in := range view.GetInstances() {
		addrs[in.GetInstanceId()] = in.GetGrpcAddress()
	}
	if id, ok := singleOwner(view); ok {
		return addrs[id]
	}
	m, ok := args.(proto.Message)
	if !ok {
		return ""
	}
	// A share session lives on the instance that serves its partitions'
	// share-partitions, their owner: ShareFetch and ShareAcknowledge go
	// to the owner of the first partition they name (the seed when they
	// name none).
	switch r := m.(type) {
	case *sharelogv1.ShareFetchRequest:
		return firstNamedOwner(view, addrs, r.GetTopics())
	case *sharelogv1.ShareAcknowledgeRequest:
		return firstNamedOwner(view, addrs, r.GetTopics())
	}
	if group, ok := groupID(m.ProtoReflect()); ok {
		for _, g := range view.GetGroups() {
			if g.GetGroupId() == group {
				return addrs[g.GetCoordinatorId()]
			}
		}
		return ""
	}
	topic, partition, ok := topicPartition(m.ProtoReflect())
	if !ok {
		return ""
	}
	return partitionOwner(view, addrs, topic, partition)
}

// firstNamedOwner is the address of the owner of the first partition
// named, "" when none is.
func firstNamedOwner(view *sharelogv1.DescribeClusterResponse, addrs map[string]string, topics []*sharelogv1.ShareFetchTopic) string {
	if len(topics) == 0 || len(topics[0].GetPartitions()) == 0 {
		return ""
	}
	return partitionOwner(view, addrs, topics[0].GetTopic(), topics[0].GetPartitions()[0].GetPartition())
}

// partitionOwner is the address of the partition's owner, "" if unknown.
func partitionOwner(view *sharelogv1.DescribeClusterResponse, addrs map[string]string, topic string, partition int32) string {
	for _, p := range view.GetPartitions() {
		if p.GetTopic() == topic && p.GetPartition() == partition {
			return addrs[p.GetOwnerId()]
		}
	}
	return ""
}

// singleOwner is the instance owning every partition and group, if one
// does (and something is owned, or the mode says one owns everything).
func singleOwner(view *sharelogv1.DescribeClusterResponse) (string, bool) {
	id := ""
	same := func(o string) bool {
		if o == "" {
			return false
		}
		if id == "" {
			id = o
		}
		return id == o
	}
	for _, p := range view.GetPartitions() {
		if !same(p.GetOwnerId()) {
			return "", false
		}
	}
	for _, g := range view.GetGroups() {
		if !same(g.GetCoordinatorId()) {
			return "", false
		}
	}
	return id, id != ""
}

// groupID reads a request's "group_id" (string, set) field: the share
// group whose coordinator serves it.
func groupID(m protoreflect.Message) (string, bool) {
	f := m.Descriptor().Fields().ByName("group_id")
	if f == nil || f.Kind() != protoreflect.StringKind || f.Cardinality() == protoreflect.Repeated {
		return "", false
	}
	g := m.Get(f).String()
	return g, g != ""
}

// topicPartition reads a request's "topic" (string) and "partition"
// (int32, set) fields.
func topicPartition(m protoreflect.Message) (string, int32, bool) {
	fields := m.Descriptor().Fields()
	tf, pf := fields.ByName("topic"), fields.ByName("partition")
	if tf == nil || pf == nil || tf.Kind() != protoreflect.StringKind || pf.Kind() != protoreflect.Int32Kind {
		return "", 0, false
	}
	if pf.HasPresence() && !m.Has(pf) {
		return "", 0, false // routed by the server (ProduceRequest without a partition)
	}
	return m.Get(tf).String(), int32(m.Get(pf).Int()), true
}

// lazyStream opens the real stream at the first SendMsg, when the request
// that decides the owner is known.
type lazyStream struct {
	c      *Conn
	ctx    context.Context
	desc   *grpc.StreamDesc
	method string
	opts   []grpc.CallOption

	s      grpc.ClientStream
	routed bool
}

var errNotOpen = status.Error(codes.Internal, "router: stream used before its request was sent")

func (l *lazyStream) SendMsg(m any) error {
	if l.s == nil {
		target, routed := l.c.target(l.ctx, l.method, m)
		s, err := target.NewStream(l.ctx, l.desc, l.method, l.opts...)
		l.c.check(routed, err)
		if err != nil {
			return err
		}
		l.s, l.routed = s, routed
	}
	return l.s.SendMsg(m)
}

func (l *lazyStream) RecvMsg(m any) error {
	if l.s == nil {
		return errNotOpen
	}
	err := l.s.RecvMsg(m)
	if err != io.EOF {
		l.c.check(l.routed, err)
	}
	return err
}

func (l *lazyStream) Header() (metadata.MD, error) {
	if l.s == nil {
		return nil, errNotOpen
	}
	return l.s.Header()
}

func (l *lazyStream) Trailer() metadata.MD {
	if l.s == nil {
		return nil
	}
	return l.s.Trailer()
}

func (l *lazyStream) CloseSend() error {
	if l.s == nil {
		return errNotOpen
	}
	return l.s.CloseSend()
}

func (l *lazyStream) Context() context.Context {
	if l.s == nil {
		return l.ctx
	}
	return l.s.Context()
}
