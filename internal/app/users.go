package app

import (
	"context"
	"fmt"
	"sync"

	"github.com/sharelog/sharelog/internal/storage/jetstream/jsusers"
	"github.com/sharelog/sharelog/internal/storage/scramcreds"
)

// The SCRAM users (internal/users) are kept in the data dir's
// scram-credentials.json with the file store, and in the KV bucket
// <prefix>_USERS in cluster mode, read by every instance alike: the
// UserService is served by whichever instance receives the call, never
// forwarded (docs/security.md "SCRAM users").

// usersStore is the cluster's credential bucket, opened on first use: NATS
// may be unreachable at start, which must not keep the instance from
// starting (it retries the connection on its own).
func (n *clusterNode) usersStore() scramcreds.Store {
	c := n.s.cfg.Cluster
	return &lazyStore{name: "KV bucket " + c.NATSPrefix + "_USERS", open: func(ctx context.Context) (scramcreds.Store, error) {
		return jsusers.Open(ctx, n.nc, jsusers.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas})
	}}
}

// lazyStore opens its store at the first call that needs it, and again
// after a failed open.
type lazyStore struct {
	name string
	open func(context.Context) (scramcreds.Store, error)

	mu    sync.Mutex
	store scramcreds.Store
}

func (l *lazyStore) get(ctx context.Context) (scramcreds.Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.store != nil {
		return l.store, nil
	}
	s, err := l.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("open the SCRAM credentials (%s): %w", l.name, err)
	}
	l.store = s
	return s, nil
}

func (l *lazyStore) String() string { return l.name }

func (l *lazyStore) Get(ctx context.Context, user, mech string) (scramcreds.Credential, bool, error) {
	s, err := l.get(ctx)
	if err != nil {
		return scramcreds.Credential{}, false, err
	}
	return s.Get(ctx, user, mech)
}

func (l *lazyStore) List(ctx context.Context) ([]scramcreds.Credential, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.List(ctx)
}

func (l *lazyStore) Put(ctx context.Context, c scramcreds.Credential) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.Put(ctx, c)
}

func (l *lazyStore) Delete(ctx context.Context, user, mech string) (bool, error) {
	s, err := l.get(ctx)
	if err != nil {
		return false, err
	}
	return s.Delete(ctx, user, mech)
}
