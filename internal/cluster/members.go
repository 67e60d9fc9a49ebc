package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// memberKeyPrefix starts the key of every instance's heartbeat in the lease
// bucket: member.<hex of the instance ID> (instance IDs may hold
// characters a KV key may not).
const memberKeyPrefix = "member."

// Member is what an instance says about itself in its heartbeat.
type Member struct {
	ID string `json:"id"`
	// Addr is the advertised gRPC address.
	Addr string `json:"addr"`
	// HTTPAddr is the REST gateway's address, empty when it is off.
	HTTPAddr string `json:"http_addr,omitempty"`
	// Mode is the instance's --cluster-mode: every instance of a
	// deployment must run the same one (docs/cluster.md).
	Mode string `json:"mode,omitempty"`
}

func memberKey(id string) string { return memberKeyPrefix + hex.EncodeToString([]byte(id)) }

// Heartbeat writes m's heartbeat key with a time to live of the lease TTL;
// an instance calls it every TTL/4 (Members.Run does), so its key expires
// TTL after it stops.
func (l *Lease) Heartbeat(ctx context.Context, m Member) error {
	if m.ID == "" {
		return errors.New("a member needs an instance ID")
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	msg := nats.NewMsg("$KV." + l.bucket + "." + memberKey(m.ID))
	msg.Data = data
	if _, err := l.js.PublishMsg(ctx, msg, njs.WithMsgTTL(l.o.TTL)); err != nil {
		return fmt.Errorf("write the heartbeat of %s: %w", m.ID, err)
	}
	return nil
}

// Leave deletes m's heartbeat key (a clean shutdown), so the others see it
// gone without waiting for the TTL.
func (l *Lease) Leave(ctx context.Context, id string) error {
	return l.kv.Delete(ctx, memberKey(id))
}

// Members lists the instances whose heartbeat has not expired, sorted by ID.
func (l *Lease) Members(ctx context.Context) ([]Member, error) {
	w, err := l.kv.WatchFiltered(ctx, []string{memberKeyPrefix + ">"}, njs.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list the cluster members: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []Member
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list the cluster members: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("list the cluster members: the watch ended")
			}
			if e == nil { // every current value seen
				slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
				return out, nil
			}
			if e.Operation() != njs.KeyValuePut {
				continue
			}
			var m Member
			if json.Unmarshal(e.Value(), &m) != nil || m.ID == "" {
				continue // not ours to judge; it expires
			}
			out = append(out, m)
		}
	}
}

// RunHeartbeat writes m's heartbeat every TTL/4 until ctx ends, then
// deletes it.
func (l *Lease) RunHeartbeat(ctx context.Context, m Member) {
	for {
		hctx, cancel := context.WithTimeout(ctx, l.interval())
		if err := l.Heartbeat(hctx, m); err != nil && ctx.Err() == nil {
			l.o.Logger.Debug("heartbeat failed", "err", err)
		}
		cancel()
		t := time.NewTimer(l.interval())
		select {
		case <-ctx.Done():
			t.Stop()
			dctx, dcancel := context.WithTimeout(context.Background(), l.interval())
			if err := l.Leave(dctx, m.ID); err != nil {
				l.o.Logger.Debug("could not delete the heartbeat; it expires after its TTL", "err", err)
			}
			dcancel()
			return
		case <-t.C:
		}
	}
}

// secretKey holds the cluster's instance secret in the lease bucket.
const secretKey = "instance-secret"

// Secret returns the cluster's instance secret: 32 random bytes, hex, made
// by the first instance that asks and kept in the lease bucket (no TTL).
// Instances present it on the calls they make on their own behalf to one
// another (a dead-letter copy appended at another partition's owner), as
// Kafka brokers use an inter-broker principal. Anyone who can read the
// bucket can read it — as anyone with those NATS permissions can read and
// write every record directly.
func (l *Lease) Secret(ctx context.Context) (string, error) {
	for {
		e, err := l.kv.Get(ctx, secretKey)
		if err == nil && len(e.Value()) == 64 {
			return string(e.Value()), nil
		}
		if err != nil && !errors.Is(err, njs.ErrKeyNotFound) {
			return "", fmt.Errorf("read the instance secret: %w", err)
		}
		if err == nil {
			return "", fmt.Errorf("the instance secret in %s is damaged (%d bytes; delete the key %s and restart)", l.bucket, len(e.Value()), secretKey)
		}
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		if _, err := l.kv.Create(ctx, secretKey, []byte(hex.EncodeToString(b[:]))); err != nil && !errors.Is(err, njs.ErrKeyExists) {
			return "", fmt.Errorf("write the instance secret: %w", err)
		}
		// Created here or by another instance at the same moment: read
		// what won.
	}
}
