package changestream_test

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/changestream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Benchmark S2: OSO vs an ordered filtered scan of a
// 1,000,000-record partition (1 KiB values, distinct keys) at prefixes
// holding 0.1, 1, 5, 50 and 100 % of the records, each prefix's keys spread
// evenly over the offsets; and what auto picks at each fraction.
//
//	go test -run '^$' -bench BenchmarkBackfill -benchtime 3x -timeout 60m ./internal/changestream/
//
// SHARELOG_BENCH_RECORDS and SHARELOG_BENCH_VALUE_BYTES change the data set
// (defaults 1000000 and 1024). The store is built once per process in a
// temporary directory (about 1.1 GB with the defaults).

var backfillFractions = []struct {
	name   string
	prefix string
	lo, hi int // record i is under prefix iff lo <= i%1000 < hi
}{
	{"0.1%", "a/", 0, 1},
	{"1%", "b/", 1, 11},
	{"5%", "c/", 11, 61},
	{"50%", "d/", 61, 561},
	{"100%", "", 0, 1000},
}

func benchKey(i int) string {
	r := i % 1000
	for _, f := range backfillFractions[:4] {
		if r >= f.lo && r < f.hi {
			return fmt.Sprintf("%s%09d", f.prefix, i)
		}
	}
	return fmt.Sprintf("z/%09d", i)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

var (
	backfillOnce  sync.Once
	backfillStore *logstore.FileStore
	backfillErr   error
	backfillN     int
	backfillDir   string
)

func closeBenchStore() {
	if backfillStore != nil {
		backfillStore.Close()
		os.RemoveAll(backfillDir)
	}
}

func backfillData(b *testing.B) (*logstore.FileStore, int) {
	backfillOnce.Do(func() {
		backfillN = envInt("SHARELOG_BENCH_RECORDS", 1_000_000)
		valueBytes := envInt("SHARELOG_BENCH_VALUE_BYTES", 1024)
		dir, err := os.MkdirTemp("", "sharelog-bench-backfill-")
		backfillDir = dir
		if err != nil {
			backfillErr = err
			return
		}
		st, err := logstore.Open(dir, logstore.Options{Fsync: logstore.FsyncNever})
		if err != nil {
			backfillErr = err
			return
		}
		if _, err = st.CreateTopic(ctx, "bench", 1, logstore.TopicConfig{RetentionMs: -1}); err != nil {
			backfillErr = err
			return
		}
		value := make([]byte, valueBytes)
		began := time.Now()
		for i := 0; i < backfillN; i += 1000 {
			recs := make([]logstore.Record, 0, 1000)
			for j := i; j < min(i+1000, backfillN); j++ {
				recs = append(recs, logstore.Record{Key: []byte(benchKey(j)), Value: value, Timestamp: 1})
			}
			if _, err = st.Append(ctx, "bench", 0, recs); err != nil {
				backfillErr = err
				return
			}
		}
		fmt.Fprintf(os.Stderr, "built %d records of %d B in %s (%s)\n", backfillN, valueBytes, time.Since(began).Round(time.Millisecond), dir)
		backfillStore = st
	})
	require.NoError(b, backfillErr)
	return backfillStore, backfillN
}

func BenchmarkBackfill(b *testing.B) {
	st, n := backfillData(b)
	managers := map[string]*changestream.Manager{}
	for _, mode := range []changestream.Backfill{changestream.BackfillEnabled, changestream.BackfillDisabled, changestream.BackfillAuto} {
		m, err := changestream.New(st, st, changestream.Config{Backfill: mode, AutoSmallRatio: 0.02, AutoLargeRatio: 0.15, AutoSmallRecordBytes: 256})
		require.NoError(b, err)
		managers[string(mode)] = m
	}
	end := int64(n)
	for _, f := range backfillFractions {
		auto, err := managers["auto"].Estimate(ctx, "bench", 0, []byte(f.prefix))
		require.NoError(b, err)
		for _, shape := range []struct {
			name string
			m    *changestream.Manager
			oso  changestream.OSOMode
		}{
			{"oso", managers["enabled"], changestream.OSOWithOffsetAdvanced},
			{"ordered", managers["disabled"], changestream.OSOOff},
			{"auto", managers["auto"], changestream.OSOWithOffsetAdvanced},
		} {
			b.Run(fmt.Sprintf("fraction=%s/shape=%s", f.name, shape.name), func(b *testing.B) {
				var items int
				for b.Loop() {
					items = 0
					err := shape.m.Stream(ctx, changestream.Request{Topic: "bench", EndOffset: &end, KeyPrefix: []byte(f.prefix), OSO: shape.oso},
						changestream.SendFunc(func(ev *changestream.Event) error {
							if ev.Kind == changestream.EventMutation || ev.Kind == changestream.EventDeletion {
								items++
							}
							return nil
						}))
					require.NoError(b, err)
				}
				b.ReportMetric(float64(items), "items")
				b.ReportMetric(float64(b.Elapsed().Seconds())/float64(b.N)*1000, "ms/backfill")
				if shape.name == "auto" {
					chose := 0.0
					if auto {
						chose = 1
					}
					b.ReportMetric(chose, "auto_chose_oso")
				}
			})
		}
	}
}
