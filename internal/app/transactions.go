package app

import (
	"fmt"
	"log/slog"

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
