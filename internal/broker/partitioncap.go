package broker

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// DefaultPartitionLimit is the default of Config.PartitionLimit
// (--max-partitions).
const DefaultPartitionLimit = 100_000

// reservePartitions admits a new topic of n partitions under
// Config.PartitionLimit (docs/operations.md "Partition cap"): the
// partitions of the store's topics, plus those of creates under way, plus
// n must not exceed it. Beyond it the create is refused with
// POLICY_VIOLATION before anything is written, so that a server never
// holds more partitions than its file-descriptor budget was sized for.
// release ends the reservation once the create is done (its topic is then
// counted from the store). gRPC and REST CreateTopic, Kafka CreateTopics
// and Kafka auto-creation come through Log.CreateTopic, so the cap holds
// for them; a share group's dead-letter topic auto-created at its first
// copy (one partition, internal/sharegroup) goes to the store directly: it
// counts toward the cap but is not refused by it.
func (l *Log) reservePartitions(ctx context.Context, name string, n int32) (release func(), err error) {
	return l.reserveCap(n, func() error { return l.checkPartitionLimitLocked(ctx, name, n) })
}

// reserveCap reserves n partitions of Config.PartitionLimit if check,
// run with l.capMu held, admits them; release gives them back.
func (l *Log) reserveCap(n int32, check func() error) (release func(), err error) {
	if l.cfg.PartitionLimit <= 0 {
		return func() {}, nil
	}
	l.capMu.Lock()
	defer l.capMu.Unlock()
	if err := check(); err != nil {
		return nil, err
	}
	l.capReserved += int64(n)
	return func() {
		l.capMu.Lock()
		l.capReserved -= int64(n)
		l.capMu.Unlock()
	}, nil
}

// checkPartitionLimit is reservePartitions without the reservation (a
// validate-only create).
func (l *Log) checkPartitionLimit(ctx context.Context, name string, n int32) error {
	if l.cfg.PartitionLimit <= 0 {
		return nil
	}
	l.capMu.Lock()
	defer l.capMu.Unlock()
	return l.checkPartitionLimitLocked(ctx, name, n)
}

// checkPartitionLimitLocked: l.capMu is held.
func (l *Log) checkPartitionLimitLocked(ctx context.Context, name string, n int32) error {
	have, err := l.partitionsHeldLocked(ctx)
	if err != nil {
		return err
	}
	limit := int64(l.cfg.PartitionLimit)
	if have+int64(n) <= limit {
		return nil
	}
	if _, err := l.store.TopicInfo(ctx, name); err == nil {
		// As below the cap: the name is taken, whatever the count (the
		// store's error, which EnsureTopic recognises).
		return fmt.Errorf("topic %q: %w", name, logstore.ErrTopicExists)
	}
	return l.capRefusal(fmt.Sprintf("topic %q", name), n, have, limit)
}

// partitionsHeldLocked is the partitions of the store's topics and of the
// creates and growths under way; l.capMu is held.
func (l *Log) partitionsHeldLocked(ctx context.Context) (int64, error) {
	topics, err := l.store.Topics(ctx)
	if err != nil {
		return 0, err
	}
	have := l.capReserved
	for _, t := range topics {
		have += int64(t.Partitions)
	}
	return have, nil
}

// capRefusal is the POLICY_VIOLATION of n more partitions for what.
func (l *Log) capRefusal(what string, n int32, have, limit int64) error {
	e := apierr.New(apierr.PolicyViolation,
		"%s: %d more partitions would make %d on this server, above its limit of %d (--max-partitions)",
		what, n, have+int64(n), limit)
	e.Metadata = map[string]string{
		"partitions":     strconv.FormatInt(have, 10),
		"max_partitions": strconv.FormatInt(limit, 10),
	}
	return e
}
