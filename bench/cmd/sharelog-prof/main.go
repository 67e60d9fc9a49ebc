//go:build benchprof

// Command sharelog-prof is the sharelog server with a CPU profile: the same
// internal/app.Start as cmd/server, configured from the subset of flags
// the benchmark harness passes, writing a pprof CPU profile of the whole
// process lifetime to --cpuprofile when it shuts down (SIGTERM).
//
// The harness builds it instead of cmd/server when BENCH_SERVER_CPUPROFILE
// is set. It lives in the bench module so that nothing of the service
// changes for profiling.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/sharelog/sharelog/internal/app"
)

func main() {
	cfg := app.DefaultConfig()
	var profile, logFormat, logLevel string
	flag.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "data directory")
	flag.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "gRPC address")
	flag.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP address")
	flag.StringVar(&cfg.Fsync, "fsync", cfg.Fsync, "always, interval or never")
	flag.StringVar(&cfg.OSOBackfill, "oso-backfill", cfg.OSOBackfill, "auto, enabled or disabled")
	flag.Int64Var(&cfg.SegmentBytes, "segment-bytes", cfg.SegmentBytes, "default segment size")
	flag.IntVar(&cfg.HealthProbesPerSec, "health-probes-per-sec", cfg.HealthProbesPerSec, "health probes per second and client IP; 0 = no limit")
	flag.StringVar(&cfg.KafkaAddr, "kafka-addr", cfg.KafkaAddr, "Kafka listener address (empty = off)")
	// Cluster mode (the X rows): the flags the harness passes.
	flag.StringVar(&cfg.Cluster.Store, "store", cfg.Cluster.Store, "file or jetstream")
	flag.StringVar(&cfg.Cluster.NATSURL, "nats-url", cfg.Cluster.NATSURL, "comma-separated NATS server URLs")
	flag.IntVar(&cfg.Cluster.NATSReplicas, "nats-replicas", cfg.Cluster.NATSReplicas, "replicas of every stream and bucket")
	flag.StringVar(&cfg.Cluster.InstanceID, "instance-id", cfg.Cluster.InstanceID, "this instance's name in the cluster")
	flag.DurationVar(&cfg.Cluster.LeaseTTL, "lease-ttl", cfg.Cluster.LeaseTTL, "ownership lease time to live")
	flag.StringVar(&cfg.Cluster.NATSPrefix, "nats-prefix", cfg.Cluster.NATSPrefix, "prefix of every stream, subject and bucket")
	flag.StringVar(&cfg.Cluster.Mode, "cluster-mode", cfg.Cluster.Mode, "active-standby or partitioned")
	flag.StringVar(&logFormat, "log-format", "json", "json (only)")
	flag.StringVar(&logLevel, "log-level", "info", "log level")
	flag.StringVar(&profile, "cpuprofile", "", "write a CPU profile here on shutdown")
	flag.Parse()
	_ = logFormat
	var level slog.Level
	_ = level.UnmarshalText([]byte(logLevel))
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := app.Start(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sharelog:", err)
		os.Exit(1)
	}
	select {
	case <-ctx.Done():
	case <-srv.Done():
	}
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "sharelog:", err)
	}
}
