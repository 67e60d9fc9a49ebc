package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
)

// leaseKey is the one key of phase 1: the lease over every partition and
// group.
const leaseKey = "active"

// LeaseBucket is the name of the lease bucket of a deployment.
func LeaseBucket(prefix string) string { return prefix + "_LEASE" }

// MinTTL is the shortest lease TTL: JetStream's per-message TTL has a
// granularity of one second.
const MinTTL = time.Second

// Options configures a Lease.
type Options struct {
	// Prefix names the lease bucket (default "SL").
	Prefix string
	// Replicas of the lease bucket (default 3).
	Replicas int
	// TTL of the lease (default 5 s, at least MinTTL).
	TTL time.Duration
	// InstanceID names this instance; it must differ between instances.
	InstanceID string
	// AdvertiseAddr is the gRPC address other instances forward to when
	// this instance is active.
	AdvertiseAddr string
	// Logger receives role changes.
	Logger *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Role is what an instance is doing.
type Role int

const (
	// Disconnected: this instance cannot tell who is active (NATS is not
	// reachable); it neither serves nor forwards.
	Disconnected Role = iota
	// Standby: another instance holds the lease; this one forwards to it.
	Standby
	// Active: this instance holds the lease and serves.
	Active
)

func (r Role) String() string {
	switch r {
	case Active:
		return "active"
	case Standby:
		return "standby"
	}
	return "disconnected"
}

// Holder is the value of the lease key.
type Holder struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
}

// Status is an instance's view of the lease.
type Status struct {
	Role Role
	// Holder is the instance holding the lease (this one when Active),
	// zero when none is known.
	Holder Holder
	// Epoch is the lease revision while Active (the owner epoch).
	Epoch uint64
	// Term is the revision the holder's term began at (zero when no
	// holder is known): unlike Epoch it stays the same across renewals and
	// grows with every new holder, so it numbers the terms, as a Kafka
	// leader epoch does (docs/cluster.md "Kafka listener").
	Term uint64
}

// leaseValue is the value of the lease key: the holder and, from its
// first renewal on, the revision its term began at (the create's own
// revision, which the create cannot know).
type leaseValue struct {
	Holder
	Term uint64 `json:"term,omitempty"`
}

// Lease takes, renews and follows the phase-1 lease. Run drives it.
type Lease struct {
	o      Options
	nc     *nats.Conn
	js     njs.JetStream
	kv     njs.KeyValue
	bucket string
	self   Holder
	value  []byte // the lease value of a create
	// renewValue is the value of the renewals of the current term (with
	// its Term); l.mu.
	renewValue []byte

	mu        sync.Mutex
	st        Status
	renewed   time.Time // when the last successful renewal or create was sent
	termStart uint64    // the revision this instance's current term began at
	seenRev   uint64    // the lease revision last read by follow
	seenAt    time.Time // when follow first read seenRev
	lastSeen  time.Time // when NATS last answered a lease read
	changed   chan struct{}

	view view // the heartbeats and item leases, as a watch delivers them
}

// Open creates the lease bucket if it is absent. It takes nothing yet.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Lease, error) {
	if o.Prefix == "" {
		o.Prefix = sljs.DefaultPrefix
	}
	if err := sljs.CheckPrefix(o.Prefix); err != nil {
		return nil, err
	}
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.TTL == 0 {
		o.TTL = 5 * time.Second
	}
	if o.TTL < MinTTL {
		return nil, fmt.Errorf("lease TTL %v is below the minimum %v", o.TTL, MinTTL)
	}
	if o.InstanceID == "" || o.AdvertiseAddr == "" {
		return nil, errors.New("a lease needs an instance ID and an advertised address")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	js, err := njs.New(nc)
	if err != nil {
		return nil, err
	}
	l := &Lease{o: o, nc: nc, js: js, bucket: LeaseBucket(o.Prefix), self: Holder{ID: o.InstanceID, Addr: o.AdvertiseAddr},
		changed: make(chan struct{})}
	if l.value, err = json.Marshal(l.self); err != nil {
		return nil, err
	}
	// Retried while transient (sljs.Retry): a peer of a NATS cluster that
	// has just formed can be marked offline for placement for a moment.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	err = sljs.Retry(ctx, func(ctx context.Context) (err error) {
		l.kv, err = js.KeyValue(ctx, l.bucket)
		if errors.Is(err, njs.ErrBucketNotFound) {
			l.kv, err = js.CreateKeyValue(ctx, njs.KeyValueConfig{
				Bucket:         l.bucket,
				Description:    "sharelog ownership lease",
				History:        1,
				Storage:        njs.FileStorage,
				Replicas:       o.Replicas,
				LimitMarkerTTL: o.TTL,
			})
			if errors.Is(err, njs.ErrBucketExists) {
				l.kv, err = js.KeyValue(ctx, l.bucket)
			}
		}
		return err
	})
	if err == nil {
		// A bucket just created answers once its replicas have elected a
		// leader; a read before that finds no responder.
		err = sljs.WaitLeader(ctx, js, "KV_"+l.bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("open the lease bucket %s: %w", l.bucket, err)
	}
	l.lastSeen = o.Now()
	l.view.l, l.view.gone = l, make(chan struct{}, 1)
	return l, nil
}

// Status returns the current view.
func (l *Lease) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

// Changed returns a channel closed at the next change of Status.
func (l *Lease) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// set changes the status; l.mu is held.
func (l *Lease) set(st Status) {
	if st == l.st {
		return
	}
	if st.Role != l.st.Role || st.Holder != l.st.Holder { // not every renewal
		l.o.Logger.Info("cluster role", "role", st.Role.String(), "holder", st.Holder.ID, "holder_addr", st.Holder.Addr, "epoch", st.Epoch)
	}
	l.st = st
	close(l.changed)
	l.changed = make(chan struct{})
}

// Fenced reports that a write of the term that began at epoch (the
// revision the lease had when this instance became active) was refused
// because another writer wrote: this instance is no longer the owner. If
// that term is still the current one (renewals only raise the revision),
// the instance stops being active at once.
func (l *Lease) Fenced(epoch uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st.Role == Active && l.st.Epoch >= epoch && l.termStart <= epoch {
		l.o.Logger.Warn("a write was fenced: another instance owns the log", "epoch", epoch)
		l.set(Status{Role: Standby})
	}
}

// interval is how often the lease is renewed or read.
func (l *Lease) interval() time.Duration { return l.o.TTL / 4 }

// margin is how long before its lease could expire an active instance
// stops serving when it cannot renew.
func (l *Lease) margin() time.Duration { return l.o.TTL / 5 }

// Run renews or follows the lease until ctx ends; then, if this instance
// is active, it releases the lease so a standby can take over without
// waiting for the TTL.
func (l *Lease) Run(ctx context.Context) {
	for {
		l.Step(ctx)
		// An active instance wakes at its stop deadline too, so that it
		// stops serving then even if a renewal is slow to fail.
		wait := l.interval()
		if d, ok := l.untilStop(); ok && d < wait {
			wait = max(d, 0)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			l.release()
			return
		case <-t.C:
		}
	}
}

// untilStop is how long an active instance may still serve without a
// renewal (false when not active).
func (l *Lease) untilStop() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st.Role != Active {
		return 0, false
	}
	return l.renewed.Add(l.o.TTL - l.margin()).Sub(l.o.Now()), true
}

// Step does one round of the lease: renew when active, else read the key
// and take it when free. Run calls it; tests may drive it directly.
func (l *Lease) Step(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, l.interval())
	defer cancel()
	st := l.Status()
	if st.Role == Active {
		d, _ := l.untilStop()
		if d <= 0 {
			l.mu.Lock()
			if l.st.Role == Active && l.st.Epoch == st.Epoch {
				l.o.Logger.Warn("lease not renewed in time: stop serving", "epoch", st.Epoch)
				l.set(Status{Role: Disconnected})
			}
			l.mu.Unlock()
			return
		}
		// A renewal that answers after the stop deadline is no use.
		rctx, rcancel := context.WithTimeout(ctx, d)
		defer rcancel()
		l.renew(rctx, st.Epoch)
		return
	}
	l.follow(ctx)
}

func (l *Lease) renew(ctx context.Context, epoch uint64) {
	sent := l.o.Now()
	msg := nats.NewMsg("$KV." + l.bucket + "." + leaseKey)
	l.mu.Lock()
	msg.Data = l.renewValue
	term := l.termStart
	l.mu.Unlock()
	ack, err := l.js.PublishMsg(ctx, msg, njs.WithExpectLastSequencePerSubject(epoch), njs.WithMsgTTL(l.o.TTL))
	var ownRev uint64
	if sljs.IsWrongLastSequence(err) {
		// A renewal of ours may have been committed while its answer was
		// lost (the bucket's leader died mid-call and a new one was
		// elected): then the key holds this term's own value at a later
		// revision, and the lease is still ours (docs/cluster.md "Lease
		// TTL and NATS elections").
		if val, rev, rerr := l.read(ctx); rerr == nil {
			var v leaseValue
			if json.Unmarshal(val, &v) == nil && v.Holder == l.self && v.Term == term && rev > epoch {
				ownRev = rev
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st.Role != Active || l.st.Epoch != epoch {
		return // fenced meanwhile
	}
	if ownRev != 0 {
		l.o.Logger.Info("a lease renewal whose answer was lost had been applied; the lease is still this instance's", "epoch", ownRev)
		l.set(Status{Role: Active, Holder: l.self, Epoch: ownRev, Term: term})
		return // renewed at an unknown time: the stop deadline stays the last known renewal's
	}
	switch {
	case err == nil:
		l.renewed, l.lastSeen = sent, sent
		l.set(Status{Role: Active, Holder: l.self, Epoch: ack.Sequence, Term: term})
	case sljs.IsWrongLastSequence(err):
		l.o.Logger.Warn("lease taken by another instance", "epoch", epoch)
		l.lastSeen = l.o.Now()
		l.set(Status{Role: Standby})
	default:
		if l.o.Now().Sub(l.renewed) >= l.o.TTL-l.margin() {
			l.o.Logger.Warn("lease not renewed in time: stop serving", "err", err, "epoch", epoch)
			l.set(Status{Role: Disconnected})
		} else {
			l.o.Logger.Debug("lease renewal failed", "err", err)
		}
	}
}

func (l *Lease) follow(ctx context.Context) {
	val, rev, err := l.read(ctx)
	if errors.Is(err, njs.ErrKeyNotFound) {
		l.take(ctx)
		return
	}
	if err == nil && l.stale(rev) {
		// The holder has not renewed for twice the TTL and the key has not
		// expired (expiry is the stream leader's job; one that just took
		// over might not have it scheduled). Delete exactly that revision
		// and take the lease: fencing protects the data if the holder is
		// somehow still writing.
		l.o.Logger.Warn("the lease holder stopped renewing and its key did not expire; taking it over", "revision", rev)
		if derr := l.kv.Delete(ctx, leaseKey, njs.LastRevision(rev)); derr == nil {
			l.take(ctx)
			return
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.unreachable(err)
		return
	}
	l.lastSeen = l.o.Now()
	var v leaseValue
	if jerr := json.Unmarshal(val, &v); jerr != nil || v.ID == "" {
		l.o.Logger.Warn("undecodable lease value; waiting for it to expire", "value", string(val))
		l.set(Status{Role: Disconnected})
		return
	}
	h, term := v.Holder, v.Term
	if term == 0 {
		term = rev // not renewed yet: the create's revision began the term
	}
	if h == l.self {
		// Our own lease, from before a fence or a restart under the same
		// ID: it is not known to be ours any more (another writer may
		// have fenced us), so let it expire rather than adopt it.
		l.set(Status{Role: Standby})
		return
	}
	l.set(Status{Role: Standby, Holder: h, Term: term})
}

// read reads the lease key from the stream leader (a direct get may be
// answered by a replica that lags, which would keep an instance trying to
// create a key that exists). An absent, deleted or expired key is
// ErrKeyNotFound.
func (l *Lease) read(ctx context.Context) ([]byte, uint64, error) {
	var resp struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Data []byte `json:"data"`
			Hdrs []byte `json:"hdrs"`
		} `json:"message"`
	}
	err := sljs.Request(ctx, l.nc, "STREAM.MSG.GET.KV_"+l.bucket, map[string]string{"last_by_subj": "$KV." + l.bucket + "." + leaseKey}, &resp)
	if sljs.APICode(err) == sljs.CodeNoMessageFound {
		return nil, 0, njs.ErrKeyNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	if resp.Message == nil {
		return nil, 0, errors.New("JetStream answered a lease read without a message")
	}
	if len(resp.Message.Hdrs) > 0 {
		h := string(resp.Message.Hdrs)
		// A delete, a purge or an expiry marker: the key is absent.
		if strings.Contains(h, "KV-Operation") || strings.Contains(h, "Nats-Marker-Reason") {
			return nil, 0, njs.ErrKeyNotFound
		}
	}
	return resp.Message.Data, resp.Message.Seq, nil
}

// stale reports whether the lease key has stayed at revision rev for more
// than twice the TTL (as this instance has seen it).
func (l *Lease) stale(rev uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Now()
	if rev != l.seenRev {
		l.seenRev, l.seenAt = rev, now
		return false
	}
	return now.Sub(l.seenAt) > 2*l.o.TTL
}

// take tries to create the lease key.
func (l *Lease) take(ctx context.Context) {
	sent := l.o.Now()
	rev, err := l.kv.Create(ctx, leaseKey, l.value, njs.KeyTTL(l.o.TTL))
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.renewed, l.lastSeen, l.termStart = sent, sent, rev
		if v, jerr := json.Marshal(leaseValue{Holder: l.self, Term: rev}); jerr == nil {
			l.renewValue = v
		} else {
			l.renewValue = l.value
		}
		l.set(Status{Role: Active, Holder: l.self, Epoch: rev, Term: rev})
	case errors.Is(err, njs.ErrKeyExists):
		l.o.Logger.Debug("lease taken by another instance first", "err", err)
		l.lastSeen = l.o.Now() // another instance won; the next read names it
	default:
		l.unreachable(err)
	}
}

// unreachable handles a failed read or create; l.mu is held.
func (l *Lease) unreachable(err error) {
	l.o.Logger.Debug("lease read or create failed", "err", err)
	if l.o.Now().Sub(l.lastSeen) >= l.o.TTL {
		if l.st.Role != Disconnected {
			l.o.Logger.Warn("the lease cannot be read: disconnected", "err", err)
		}
		l.set(Status{Role: Disconnected})
	}
}

// release deletes the lease key if this instance holds it (CAS on its
// revision), so that a standby takes over at its next read.
func (l *Lease) release() {
	l.mu.Lock()
	st := l.st
	if st.Role == Active {
		l.set(Status{Role: Standby})
	}
	l.mu.Unlock()
	if st.Role != Active {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.interval())
	defer cancel()
	if err := l.kv.Delete(ctx, leaseKey, njs.LastRevision(st.Epoch)); err != nil {
		l.o.Logger.Warn("could not release the lease; it expires after its TTL", "err", err)
	}
}
