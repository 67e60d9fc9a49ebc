package logstore

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
)

// CatalogTopic is what a Catalog holds: a store's own topic (its
// partitions, its files or streams), which knows its description. The
// description of a topic value never changes: an alteration (AlterTopic)
// puts a new value in its place (Replace), which may share the old one's
// partitions.
type CatalogTopic interface {
	comparable
	Info() TopicInfo
}

// Catalog is a store's topic catalog in memory: the live topics by name and
// the rules every Store applies to them, so that the file store, the memory
// store and the JetStream log (internal/storage/jetstream/jslog) answer
// CreateTopic, DeleteTopic, the lookups and Close alike:
//
//   - a create is validated and normalized (the name, the partition count,
//     the config; errors wrap ErrInvalidArgument) before anything else, and
//     gets a new topic ID, a random version 4 UUID;
//   - a name is held by one topic at a time: a create of a name that is
//     taken, or reserved by a create under way, is ErrTopicExists;
//   - a name or partition that is not there is ErrUnknownTopic, and a
//     deleted topic's partitions fail with TopicDeletedError;
//   - once closed, every call is ErrClosed.
//
// Persisting the catalog stays the store's (meta.json files, the metadata
// bucket); so do the store's checks of the caller's context.
//
// Locks: Catalog.mu guards the map and is held only inside these methods
// (and Update's next); never during I/O. A store takes it before its
// partitions' locks, never under them.
type Catalog[T CatalogTopic] struct {
	mu       sync.RWMutex
	topics   map[string]T
	creating map[string]struct{} // names reserved by a create under way
	revs     map[string]uint64   // Update: the highest revision applied per name
	closed   bool
}

// NewCatalog returns an empty catalog.
func NewCatalog[T CatalogTopic]() *Catalog[T] {
	return &Catalog[T]{topics: make(map[string]T), creating: make(map[string]struct{}), revs: make(map[string]uint64)}
}

// TopicDeletedError is the error a deleted topic's partitions fail with
// (it wraps ErrUnknownTopic).
func TopicDeletedError(name string) error {
	return fmt.Errorf("topic %q was deleted: %w", name, ErrUnknownTopic)
}

// Prepare validates a CreateTopic request and checks that its name is free
// (ErrClosed, ErrTopicExists), and returns the new topic's description,
// under a new ID. It reserves nothing: for a store whose persistence
// decides between concurrent creates of one name (the JetStream log's
// create-if-absent); the others Reserve.
func (c *Catalog[T]) Prepare(name string, partitions int32, cfg TopicConfig) (TopicInfo, error) {
	return c.prepare(name, partitions, cfg, false)
}

// Reserve is Prepare that also holds the name, until Install or Release:
// meanwhile a create of the same name is ErrTopicExists, while the store
// builds the topic without the catalog's lock.
func (c *Catalog[T]) Reserve(name string, partitions int32, cfg TopicConfig) (TopicInfo, error) {
	return c.prepare(name, partitions, cfg, true)
}

func (c *Catalog[T]) prepare(name string, partitions int32, cfg TopicConfig, reserve bool) (TopicInfo, error) {
	cfg, err := normalizeTopic(name, partitions, cfg)
	if err != nil {
		return TopicInfo{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return TopicInfo{}, ErrClosed
	}
	_, busy := c.creating[name]
	if _, ok := c.topics[name]; ok || busy {
		return TopicInfo{}, fmt.Errorf("topic %q: %w", name, ErrTopicExists)
	}
	if reserve {
		c.creating[name] = struct{}{}
	}
	return TopicInfo{Name: name, ID: newTopicID(), Partitions: partitions, Config: cfg}, nil
}

// Release ends the reservation of name, whose topic was not built.
func (c *Catalog[T]) Release(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.creating, name)
}

// Install ends the reservation of t's name and adds t. It is ErrClosed if
// the catalog was closed meanwhile: t is not added, and the caller shuts
// it down.
func (c *Catalog[T]) Install(t T) error {
	name := t.Info().Name
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.creating, name)
	if c.closed {
		return ErrClosed
	}
	if _, ok := c.topics[name]; ok { // only without a reservation
		return fmt.Errorf("topic %q: %w", name, ErrTopicExists)
	}
	c.topics[name] = t
	return nil
}

// Add adds t as the store opens, from its persisted catalog; a name held
// already is an error (the store holds two topics of one name).
func (c *Catalog[T]) Add(t T) error {
	info := t.Info()
	c.mu.Lock()
	defer c.mu.Unlock()
	if other, ok := c.topics[info.Name]; ok {
		return fmt.Errorf("topic %q is stored twice, with ids %s and %s", info.Name, other.Info().ID, info.ID)
	}
	c.topics[info.Name] = t
	return nil
}

// Update applies a change to name's topic found at revision rev of the
// store's persisted catalog (a store following it through a watch),
// unless the catalog is closed or a change of name at rev or later was
// applied already (then applied is false). next gets the current topic
// (the zero T when there is none) and returns what name holds from now on:
// the zero T removes it, cur leaves it. gone is the topic replaced or
// removed, for the caller to shut down (TopicDeletedError); the zero T
// when there is none.
func (c *Catalog[T]) Update(name string, rev uint64, next func(cur T) T) (gone T, applied bool) {
	var zero T
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || rev <= c.revs[name] {
		return zero, false
	}
	c.revs[name] = rev
	cur := c.topics[name]
	nt := next(cur)
	switch {
	case nt == cur:
		return zero, true
	case nt == zero:
		delete(c.topics, name)
	default:
		c.topics[name] = nt
	}
	return cur, true
}

// Replace puts next in the place of cur under name (an alteration of the
// topic): ErrClosed, or ErrUnknownTopic when name no longer holds cur (the
// topic was deleted meanwhile), and then nothing changes.
func (c *Catalog[T]) Replace(name string, cur, next T) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if t, ok := c.topics[name]; !ok || t != cur {
		return TopicDeletedError(name)
	}
	c.topics[name] = next
	return nil
}

// Lookup returns the topic named name: ErrClosed, or ErrUnknownTopic.
func (c *Catalog[T]) Lookup(name string) (T, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.lookupLocked(name)
}

// lookupLocked is Lookup; c.mu is held.
func (c *Catalog[T]) lookupLocked(name string) (T, error) {
	var zero T
	if c.closed {
		return zero, ErrClosed
	}
	t, ok := c.topics[name]
	if !ok {
		return zero, fmt.Errorf("topic %q: %w", name, ErrUnknownTopic)
	}
	return t, nil
}

// LookupPartition is Lookup that also checks that the topic has the
// partition (ErrUnknownTopic).
func (c *Catalog[T]) LookupPartition(name string, part int32) (T, error) {
	t, err := c.Lookup(name)
	if err != nil {
		return t, err
	}
	if n := t.Info().Partitions; part < 0 || part >= n {
		var zero T
		return zero, fmt.Errorf("topic %q has %d partitions, no partition %d: %w", name, n, part, ErrUnknownTopic)
	}
	return t, nil
}

// TopicID returns the ID of the topic named name (KeyIndexer.TopicID).
func (c *Catalog[T]) TopicID(name string) (string, error) {
	t, err := c.Lookup(name)
	if err != nil {
		return "", err
	}
	return t.Info().ID, nil
}

// Infos returns the description of every topic, sorted by name (Topics).
func (c *Catalog[T]) Infos() ([]TopicInfo, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, ErrClosed
	}
	out := make([]TopicInfo, 0, len(c.topics))
	for _, t := range c.topics {
		out = append(out, t.Info())
	}
	slices.SortFunc(out, func(a, b TopicInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Remove takes the topic named name out of the catalog (DeleteTopic) and
// returns it, for the caller to shut down (TopicDeletedError) and to
// delete what persists of it: ErrClosed, or ErrUnknownTopic.
func (c *Catalog[T]) Remove(name string) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := c.lookupLocked(name)
	if err == nil {
		delete(c.topics, name)
	}
	return t, err
}

// RemoveIf takes t out of the catalog if name still holds it: for a store
// that deleted t's persisted entry after looking it up.
func (c *Catalog[T]) RemoveIf(name string, t T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.topics[name]; ok && cur == t {
		delete(c.topics, name)
	}
}

// All returns the topics, closed or not, in no order: for the store's
// background tasks.
func (c *Catalog[T]) All() []T {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]T, 0, len(c.topics))
	for _, t := range c.topics {
		out = append(out, t)
	}
	return out
}

// Close closes the catalog and returns its topics, for the caller to shut
// down; first is false when it was closed already (then topics is nil).
// The topics stay for All.
func (c *Catalog[T]) Close() (topics []T, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false
	}
	c.closed = true
	topics = make([]T, 0, len(c.topics))
	for _, t := range c.topics {
		topics = append(topics, t)
	}
	return topics, true
}
