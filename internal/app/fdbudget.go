package app

import (
	"fmt"
	"log/slog"
)

// maxOpenSegmentsCap bounds --max-open-segments (and its default): above
// it the kernel's own limits (fs.nr_open, 1048576 by default) bind anyway.
const maxOpenSegmentsCap = 1 << 20

// fdBudget raises RLIMIT_NOFILE's soft limit to its hard limit, logs both,
// and returns the segment-file budget (docs/operations.md "File
// descriptors"): --max-open-segments, or by default half of the soft
// limit, leaving the other half for connections (gRPC, HTTP, Kafka, the
// gateway's own), the share-state log, key-index scans and the files the
// store opens briefly (checkpoints, indexes, new segments). A budget at
// or above the soft limit would let segment files take every descriptor,
// the outage the budget is there to prevent: it is a start-up error.
func fdBudget(cfg Config, log *slog.Logger) (int, error) {
	soft, hard, err := raiseNoFile()
	if err != nil {
		// No limit to read (or to raise) on this platform: the flag's
		// value, or a fixed default, with no check against the limit.
		n := cfg.MaxOpenSegments
		if n == 0 {
			n = defaultOpenSegmentsUnknown
		}
		log.Warn("file descriptor limit unknown; segment files budgeted without it", "max_open_segments", n, "err", err)
		return n, nil
	}
	n := cfg.MaxOpenSegments
	if n == 0 {
		n = int(min(soft/2, maxOpenSegmentsCap))
	}
	log.Info("file descriptor limit", "soft", soft, "hard", hard, "max_open_segments", n, "max_partitions", cfg.MaxPartitions)
	if uint64(n) >= soft {
		return 0, fmt.Errorf("--max-open-segments %d must be below the RLIMIT_NOFILE soft limit %d (hard limit %d): connections and other files need descriptors too (docs/operations.md)", n, soft, hard)
	}
	if n < 1 {
		return 0, fmt.Errorf("RLIMIT_NOFILE soft limit %d (hard limit %d) leaves no descriptors for segment files: raise it (ulimit -n, LimitNOFILE=)", soft, hard)
	}
	return n, nil
}

// defaultOpenSegmentsUnknown is the budget where RLIMIT_NOFILE cannot be
// read.
const defaultOpenSegmentsUnknown = 4096
