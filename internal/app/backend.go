package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/changestream"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jslog"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
	"github.com/sharelog/sharelog/internal/telemetry"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
	"github.com/sharelog/sharelog/internal/txn"
)

// backend is what serves the API over one log store and one share-state
// store: the share-group manager, the change-stream manager and the three
// gRPC services. The file store has one for the process's life; in cluster
// mode an instance opens one each time it becomes active and closes it when
// it stops being active.
type backend struct {
	share   *sharegroup.Manager
	streams *changestream.Manager
	logAPI  *broker.Log // the log domain (over the store, purges counted), under every transport
	logSvc  sharelogv1.LogServiceServer
	shareSv sharelogv1.ShareGroupServiceServer
	change  sharelogv1.ChangeStreamServiceServer
	// groups is the consumer-group coordinator in cluster mode, with a
	// Kafka listener (nil otherwise; the file mode's is Server.groups).
	groups *consumergroup.Coordinator
	// txn is the transaction coordinator in active-standby cluster mode,
	// with a Kafka listener (nil otherwise; the file mode's is Server.txn).
	txn *txn.Coordinator
	// txnState: in cluster mode the cluster's transaction bucket held
	// state when the backend opened (read so by a backend without a
	// coordinator: transactionsUsed).
	txnState atomic.Bool
	// cgSvc is ConsumerGroupService over groups in cluster mode (set by
	// withGroups; without groups it answers FAILED_PRECONDITION).
	cgSvc sharelogv1.ConsumerGroupServiceServer
}

// withGroups makes c this backend's consumer-group coordinator, served by
// its ConsumerGroupService (the cluster routing calls it: forward.go,
// partitioned.go).
func (b *backend) withGroups(c *consumergroup.Coordinator, guard *authz.Guard) {
	b.groups = c
	b.cgSvc = grpcapi.NewConsumerGroupService(c, "", guard)
}

// openBackend builds a backend over store (already traced), keys (its key
// index, untraced) and state, which the share-group manager takes over.
// view is what DescribeCluster reports about the instances and owners;
// route, in partitioned mode, is who serves each partition (nil: all here).
func (s *Server) openBackend(store logstore.Store, keys logstore.KeyIndexer, state sharestate.Store, o Options, view grpcapi.ClusterSource, owners *sharegroup.Options, route *logRoute, prod producerStore) (*backend, error) {
	cfg, log := s.cfg, s.log
	b := &backend{}
	if owners == nil {
		owners = &sharegroup.Options{}
	}
	purges, err := newPurgeCounting(store, s.tel.Meter)
	if err != nil {
		_ = state.Close()
		return nil, err
	}
	bcfg := broker.Config{SegmentBytes: cfg.SegmentBytes, LongPolls: s.longPolls, Budget: s.budget, Logger: log,
		ProducerIDs: prod.ids, Resync: prod.resync, PartitionLimit: cfg.MaxPartitions}
	if route != nil {
		bcfg.Owners, bcfg.Peers, bcfg.Controller = route.owners, route.peers, route.controller
	}
	logAPI := broker.New(purges, bcfg)
	if b.share, err = sharegroup.Open(store, state, sharegroup.Options{
		Owner:                   owners.Owner,
		Coordinates:             owners.Coordinates,
		FollowedConfig:          owners.FollowedConfig,
		Coordinators:            owners.Coordinators,
		Peers:                   owners.Peers,
		Logger:                  log,
		RecordLockDuration:      cfg.ShareRecordLockDuration,
		MinRecordLockDuration:   cfg.ShareMinRecordLockDuration,
		MaxRecordLockDuration:   cfg.ShareMaxRecordLockDuration,
		DeliveryCountLimit:      cfg.ShareDeliveryCountLimit,
		PartitionMaxRecordLocks: cfg.SharePartitionMaxRecordLocks,
		SessionTimeout:          cfg.ShareSessionTimeout,
		HeartbeatInterval:       cfg.ShareHeartbeatInterval,
		MaxShareSessions:        cfg.MaxShareSessions,
		SessionIdleTimeout:      cfg.ShareSessionIdleTimeout,
		GroupMaxSize:            cfg.ShareGroupMaxSize,
		DLQAutoCreateTopics:     cfg.DLQAutoCreateTopics,
		DLQTopicPrefix:          cfg.DLQTopicPrefix,
		DeadLetters:             logAPI, // at the dead-letter partition's owner
		DeadLetterAfterAppend:   o.DeadLetterAfterAppend,
		MaxSessionsPerPrincipal: cfg.MaxShareSessionsPerPrincipal,
		LongPolls:               s.longPolls,
		Budget:                  s.budget,
		Transactions:            shareTxns{logAPI},
	}); err != nil {
		return nil, fmt.Errorf("open share-group state: %w", err)
	}
	b.logAPI = logAPI
	// Share state bound to a deleted topic goes with it, whichever
	// transport deleted it.
	logAPI.Subscribe(func(ev broker.TopicEvent) {
		if ev.Kind == broker.TopicDeleted {
			b.share.TopicDeleted(ev.Topic.ID)
		}
	})
	b.logSvc = grpcapi.NewLogService(logAPI, s.guard).WithCluster(view, func() ([]string, error) {
		groups, err := b.share.ListGroups(context.Background(), sharegroup.StateUnknown)
		ids := make([]string, len(groups))
		for i, g := range groups {
			ids[i] = g.GroupID
		}
		return ids, err
	})
	b.shareSv = grpcapi.NewShareGroupService(b.share, s.guard, grpcapi.WithDLQAutoCreate(s.cfg.DLQAutoCreateTopics))
	// Change streams get the traced store and the traced key index, so
	// their reads are spans of the call, as every other RPC's.
	tracedKeys := telemetry.TraceKeyIndex(keys, s.tel.Tracer, s.tel.Meter)
	var streamOwners broker.Owners
	var streamPeers changestream.Peers
	if route != nil {
		streamOwners, streamPeers = route.owners, route.peers
	}
	if b.streams, err = changestream.New(store, tracedKeys, changestream.Config{
		Backfill:               changestream.Backfill(cfg.OSOBackfill),
		AutoSmallRatio:         cfg.OSOAutoSmallRatio,
		AutoLargeRatio:         cfg.OSOAutoLargeRatio,
		AutoSmallRecordBytes:   cfg.OSOAutoSmallRecordBytes,
		MaxStreams:             cfg.MaxChangeStreams,
		MaxStreamsPerPrincipal: cfg.MaxChangeStreamsPerPrincipal,
		Budget:                 s.budget,
		Meter:                  s.tel.Meter,
		Owners:                 streamOwners,
		Peers:                  streamPeers,
		Transactions:           streamTxns{logAPI, func() bool { return s.transactionsUsed() || b.transactionsUsed() }},
	}); err != nil {
		_ = b.share.Close()
		return nil, err
	}
	b.change = grpcapi.NewChangeStreamService(b.streams, s.guard)
	b.cgSvc = grpcapi.NewConsumerGroupService(nil, consumerGroupsUnserved, s.guard)
	return b, nil
}

// logRoute is who serves each partition and who creates and deletes
// topics, for the log API and the change streams of a partitioned
// instance (broker.Config.Owners, Peers and Controller;
// changestream.Config.Owners and Peers).
type logRoute struct {
	owners     broker.Owners
	peers      grpcPeers
	controller broker.Controller
}

// producerStore is what the idempotent producer needs of the stores
// (broker.Config.ProducerIDs and Resync): the file counter of the data
// directory and no resync (file mode), or the JetStream log store's
// counter and its Resync (cluster modes).
type producerStore struct {
	ids    broker.ProducerIDBlocks
	resync func(ctx context.Context, topic string, part int32) error
}

// jsProducers is producerStore over the JetStream log store.
func jsProducers(ls *jslog.Store) producerStore {
	return producerStore{ids: ls, resync: ls.Resync}
}

// close ends the backend's streams and sessions and closes the share
// state (not the log store, which the caller owns).
func (b *backend) close(log *slog.Logger) error {
	b.streams.Shutdown()
	if b.txn != nil {
		b.txn.Close() // its timeout checks write through the groups below
	}
	if b.groups != nil {
		if err := b.groups.Close(); err != nil {
			log.Warn("close consumer groups", "err", err)
		}
	}
	if err := b.share.Close(); err != nil {
		log.Warn("close share groups", "err", err)
		return fmt.Errorf("close share groups: %w", err)
	}
	return nil
}

// transactionsUsed reports whether this cluster backend's log may hold
// transactional records: its coordinator has state (active-standby), or
// the cluster's transaction bucket had some when it opened. The file
// mode's is Server.transactionsUsed.
func (b *backend) transactionsUsed() bool {
	return b.txnState.Load() || b.txn != nil && b.txn.Used()
}

// shareTxns gives read-committed share groups the broker's view of a
// partition's transactions (docs/kafka.md "Transactions").
type shareTxns struct{ log *broker.Log }

func (t shareTxns) ReadCommitted(ctx context.Context, topic string, part int32, from, to int64) (int64, []sharegroup.AbortedTxn, error) {
	v, err := t.log.ReadCommittedView(ctx, topic, part, from, to)
	if err != nil {
		return 0, nil, err
	}
	out := make([]sharegroup.AbortedTxn, len(v.Aborted))
	for i, a := range v.Aborted {
		out[i] = sharegroup.AbortedTxn{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset, MarkerOffset: a.LastOffset}
	}
	return v.LastStable, out, nil
}
