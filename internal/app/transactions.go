package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstxn"
	"github.com/sharelog/sharelog/internal/storage/txnstate"
	"github.com/sharelog/sharelog/internal/txn"
)

// openTransactions opens the Kafka transaction coordinator (docs/kafka.md
// "Transactions") of the file-store mode over the data directory's
// transaction state, the log and the consumer groups.
func openTransactions(cfg Config, log *broker.Log, groups *consumergroup.Coordinator, logger *slog.Logger) (*txn.Coordinator, error) {
	sync := fsutil.SyncFileAndDir
	if cfg.Fsync == "never" {
		sync = fsutil.NoSync
	}
	return openTxnCoordinator(cfg, txnstate.Open(cfg.DataDir, sync), log, groups, logger)
}

// openClusterTransactions opens the transaction coordinator of the active
// instance's term begun at epoch (active-standby mode): its state in the
// cluster's KV bucket (jstxn), read and fenced with the term, so that the
// previous active instance, should it still run, has every write of it
// refused; a write refused so calls fenced, which deposes this instance
// as a fenced append does. Loading the state completes what a failover
// left being ended (txn.New), over this term's log and consumer groups.
func openClusterTransactions(ctx context.Context, cfg Config, nc *nats.Conn, epoch uint64, fenced func(), log *broker.Log, groups *consumergroup.Coordinator, logger *slog.Logger) (*txn.Coordinator, error) {
	c := cfg.Cluster
	st, err := jstxn.Open(ctx, nc, jstxn.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas, Epoch: epoch,
		OnFenced: func(string) { fenced() }, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("open the transaction state: %w", err)
	}
	return openTxnCoordinator(cfg, st, log, groups, logger)
}

// readTxnState notes in b whether the cluster's transaction bucket holds
// any state, for a backend without a coordinator: its log may then hold
// transactional records (backend.transactionsUsed). A bucket that cannot
// be read counts as holding some: the readers' checks then cost a scan,
// but never deliver an open or aborted transaction's records.
func (n *clusterNode) readTxnState(ctx context.Context, b *backend) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	has, err := jstxn.HasState(ctx, n.nc, n.s.cfg.Cluster.NATSPrefix)
	if err != nil {
		n.s.log.Warn("cannot read the transaction bucket; change streams check every record for transactions", "err", err)
		has = true
	}
	b.txnState.Store(has)
}

func openTxnCoordinator(cfg Config, st txnstate.Store, log *broker.Log, groups *consumergroup.Coordinator, logger *slog.Logger) (*txn.Coordinator, error) {
	c, err := txn.New(txn.Options{
		Store:        st,
		Log:          log,
		Groups:       groups,
		MaxTimeout:   cfg.TransactionMaxTimeout,
		IDExpiration: cfg.TransactionalIDExpiration,
		Logger:       logger,
	})
	if err != nil {
		return nil, fmt.Errorf("open the transaction coordinator: %w", err)
	}
	return c, nil
}

// readTransactionsUsed notes whether the data directory has transaction
// state: transactional ids were used, so the log may hold transactional
// records, whether or not this run serves Kafka.
func (s *Server) readTransactionsUsed(dir string) error {
	_, err := os.Stat(filepath.Join(dir, txnstate.FileName))
	switch {
	case err == nil:
		s.txnsUsed.Store(true)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("read the transaction state: %w", err)
	}
	return nil
}

// transactionsUsed reports whether the log may hold transactional
// records: this data directory had transaction state when the server
// started, or the coordinator has written some since. Until then readers
// skip the pass over the log a read-committed view costs.
func (s *Server) transactionsUsed() bool {
	if s.txnsUsed.Load() {
		return true
	}
	if s.txn != nil && s.txn.Used() {
		s.txnsUsed.Store(true)
		return true
	}
	return false
}

// streamTxns gives change streams the broker's view of a partition's
// transactions (docs/change-streams.md "Transactions") once the log may
// hold any (used); before, every record is committed.
type streamTxns struct {
	log  *broker.Log
	used func() bool
}

func (t streamTxns) ReadCommittedView(ctx context.Context, topic string, part int32, from, to int64) (broker.TxnView, error) {
	if !t.used() {
		return broker.TxnView{LastStable: math.MaxInt64, HighWatermark: math.MaxInt64}, nil
	}
	return t.log.ReadCommittedView(ctx, topic, part, from, to)
}
