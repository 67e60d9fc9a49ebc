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

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/txnstate"
	"github.com/sharelog/sharelog/internal/txn"
)

// openTransactions opens the Kafka transaction coordinator (docs/kafka.md
// "Transactions") over the data directory's transaction state, the log
// and the consumer groups. File-store mode only: in cluster mode the
// Kafka listener serves no transactions yet.
func openTransactions(cfg Config, log *broker.Log, groups *consumergroup.Coordinator, logger *slog.Logger) (*txn.Coordinator, error) {
	sync := fsutil.SyncFileAndDir
	if cfg.Fsync == "never" {
		sync = fsutil.NoSync
	}
	c, err := txn.New(txn.Options{
		Store:      txnstate.Open(cfg.DataDir, sync),
		Log:        log,
		Groups:     groups,
		MaxTimeout: cfg.TransactionMaxTimeout,
		Logger:     logger,
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
