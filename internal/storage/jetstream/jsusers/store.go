// Package jsusers is the JetStream implementation of scramcreds.Store: the
// SCRAM credentials of cluster mode in the KV bucket <prefix>_USERS, one
// key per user and mechanism, <hex of the user>.<mechanism>, holding the
// credential's JSON (scramcreds.Record: salt, iterations, StoredKey,
// ServerKey; never a password). Every instance reads the bucket, so a
// user set through one instance logs in at every other at once.
//
// Reads go to the bucket on every call (a login is rare next to the
// requests it admits); a bucket that cannot be reached fails the call with
// scramcreds.ErrStorage rather than answering "no such user".
package jsusers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/scramcreds"
)

// Options configures Open.
type Options struct {
	// Prefix names the bucket (default sljs.DefaultPrefix).
	Prefix string
	// Replicas of the bucket when it is created (default 3).
	Replicas int
	// Timeout bounds each operation (default 10 s).
	Timeout time.Duration
}

// Store is the credentials in one KV bucket.
type Store struct {
	kv      njs.KeyValue
	bucket  string
	timeout time.Duration
}

var _ scramcreds.Store = (*Store)(nil)

// Open creates the bucket if needed (or opens it as the operator left it)
// and waits for its leader.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Store, error) {
	if err := sljs.BucketDefaults(&o.Prefix, &o.Replicas, &o.Timeout); err != nil {
		return nil, err
	}
	js, err := njs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w (%w)", err, scramcreds.ErrStorage)
	}
	octx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	bucket := sljs.UsersBucket(o.Prefix)
	kv, err := sljs.OpenKV(octx, js, bucket, "sharelog SCRAM credentials", o.Replicas)
	if err != nil {
		return nil, sljs.Wrap(ctx, "open the SCRAM credential bucket "+bucket, err, scramcreds.ErrStorage)
	}
	return &Store{kv: kv, bucket: bucket, timeout: o.Timeout}, nil
}

func (s *Store) String() string { return "KV bucket " + s.bucket }

func (s *Store) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// key is the credential's KV key; a mechanism name is a valid key token.
func key(user, mechanism string) string { return sljs.HexKey(user) + "." + mechanism }

func (s *Store) decode(k string, raw []byte) (scramcreds.Credential, error) {
	var r scramcreds.Record
	if err := json.Unmarshal(raw, &r); err != nil {
		return scramcreds.Credential{}, fmt.Errorf("%s key %s is damaged: %w (%w)", s, k, err, scramcreds.ErrStorage)
	}
	c, err := r.Credential()
	if err != nil {
		return c, fmt.Errorf("%s key %s is damaged: %w (%w)", s, k, err, scramcreds.ErrStorage)
	}
	return c, nil
}

// Get reads the credential's key.
func (s *Store) Get(ctx context.Context, user, mechanism string) (scramcreds.Credential, bool, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	k := key(user, mechanism)
	e, err := s.kv.Get(octx, k)
	if errors.Is(err, njs.ErrKeyNotFound) {
		return scramcreds.Credential{}, false, nil
	}
	if err != nil {
		return scramcreds.Credential{}, false, sljs.Wrap(ctx, "read "+s.String(), err, scramcreds.ErrStorage)
	}
	c, err := s.decode(k, e.Value())
	return c, err == nil, err
}

// List reads every key of the bucket.
func (s *Store) List(ctx context.Context) ([]scramcreds.Credential, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	lister, err := s.kv.ListKeys(octx)
	if err != nil {
		return nil, sljs.Wrap(ctx, "list "+s.String(), err, scramcreds.ErrStorage)
	}
	defer func() { _ = lister.Stop() }()
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if octx.Err() != nil {
		return nil, sljs.Wrap(ctx, "list "+s.String(), octx.Err(), scramcreds.ErrStorage)
	}
	out := make([]scramcreds.Credential, 0, len(keys))
	for _, k := range keys {
		if !strings.Contains(k, ".") {
			continue
		}
		e, err := s.kv.Get(octx, k)
		if errors.Is(err, njs.ErrKeyNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			return nil, sljs.Wrap(ctx, "read "+s.String(), err, scramcreds.ErrStorage)
		}
		c, err := s.decode(k, e.Value())
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	scramcreds.Sort(out)
	return out, nil
}

// Put writes the credential's key.
func (s *Store) Put(ctx context.Context, c scramcreds.Credential) error {
	raw, err := json.Marshal(scramcreds.ToRecord(c))
	if err != nil {
		return err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	if _, err := s.kv.Put(octx, key(c.User, c.Mechanism), raw); err != nil {
		return sljs.Wrap(ctx, "write "+s.String(), err, scramcreds.ErrStorage)
	}
	return nil
}

// Delete removes the credential's key, if it exists. The deletion is
// conditional on the revision read, so a credential set again in between
// by another instance is not lost: the call then fails and may be retried.
func (s *Store) Delete(ctx context.Context, user, mechanism string) (bool, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	k := key(user, mechanism)
	e, err := s.kv.Get(octx, k)
	if errors.Is(err, njs.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, sljs.Wrap(ctx, "read "+s.String(), err, scramcreds.ErrStorage)
	}
	if err := s.kv.Delete(octx, k, njs.LastRevision(e.Revision())); err != nil {
		return false, sljs.Wrap(ctx, "delete from "+s.String(), err, scramcreds.ErrStorage)
	}
	return true, nil
}
