package app

import (
	"fmt"
	"strings"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// Health probes need no token, so they are rate-limited per client IP
// (edge.IPLimiter): a probe costs nearly nothing, but a flood of them
// should not.
const healthLimiterIPs = 4096 // limiters kept; the least recently used go first

// HealthWatchesPerIP bounds the gRPC health Watch streams one client IP
// holds open at once without a credential. Health needs none and a Watch
// lasts, so without it one address could pile them up (a goroutine and
// buffers each) at the probe rate. A client watches a few services at
// most; the room is for clients sharing an address (NAT), and calls with
// a valid credential are not counted.
const HealthWatchesPerIP = 64

// ReadinessCheck is one source of not-readiness: while Check reports
// ok == false, /readyz answers 503 with the reason, and gRPC health reports
// NOT_SERVING for the whole server ("") and for Service. Liveness
// (/healthz) is not affected: a server whose disk is full should not be
// restarted in a loop by its supervisor, it recovers once space is freed.
//
// The server wires its own checks (offline partitions, offline
// share-partitions); Options.ReadinessChecks adds more.
type ReadinessCheck struct {
	// Service is the gRPC service the failure affects, e.g.
	// sharelogv1.LogService_ServiceDesc.ServiceName; "" affects only the
	// server-wide status.
	Service string
	// Check reports whether the source is fine and, if not, why. It is
	// called on every /readyz request and every readiness interval, so it
	// must be cheap.
	Check func() (reason string, ok bool)
}

// DefaultReadinessInterval is how often gRPC health statuses are refreshed
// from the readiness checks.
const DefaultReadinessInterval = time.Second

// healthServices are the names whose gRPC health status the server sets.
var healthServices = []string{"", sharelogv1.LogService_ServiceDesc.ServiceName,
	sharelogv1.ShareGroupService_ServiceDesc.ServiceName, sharelogv1.ChangeStreamService_ServiceDesc.ServiceName}

// notReady returns the reasons of the failing checks (empty = ready) and the
// services they affect.
func (s *Server) notReady() (reasons []string, services map[string]bool) {
	for _, c := range s.readiness {
		if reason, ok := c.Check(); !ok {
			reasons = append(reasons, reason)
			if services == nil {
				services = map[string]bool{}
			}
			services[c.Service] = true
		}
	}
	return reasons, services
}

// readyz is /readyz's answer: ok, or why not.
func (s *Server) readyz() (reasons []string, ok bool) {
	if !s.ready.Load() {
		return []string{"the server is starting or shutting down"}, false
	}
	reasons, _ = s.notReady()
	ok = len(reasons) == 0
	if s.cluster != nil {
		// The cluster role is shown whether ready or not.
		reasons = append([]string{s.cluster.roleLine()}, reasons...)
	}
	return reasons, ok
}

// refreshHealth sets every gRPC health status from the readiness checks and
// logs changes of readiness.
func (s *Server) refreshHealth() {
	reasons, down := s.notReady()
	for _, name := range healthServices {
		st := healthpb.HealthCheckResponse_SERVING
		if len(reasons) > 0 && (name == "" || down[name]) {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		s.health.SetServingStatus(name, st)
	}
	joined := strings.Join(reasons, "; ")
	if joined == s.lastNotReady {
		return
	}
	if joined != "" {
		s.log.Warn("not ready", "reasons", reasons)
	} else {
		s.log.Info("ready again")
	}
	s.lastNotReady = joined
}

// healthLoop refreshes the gRPC health statuses until stop closes.
func (s *Server) healthLoop(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.refreshHealth()
		}
	}
}

// partitionsOnline is the log store's readiness: no partition offline (damaged
// files found at start, or a write that failed and has not yet succeeded
// again). See docs/operations.md.
func (s *Server) partitionsOnline() (string, bool) {
	off := s.store.Offline()
	if len(off) == 0 {
		return "", true
	}
	return offlineReason("partition", len(off), fmt.Sprintf("%s-%d: %v", off[0].Topic, off[0].Partition, off[0].Err)), false
}

// sharePartitionsOnline is the share groups' readiness: no share-partition
// whose state was lost or whose last state write failed.
func (s *Server) sharePartitionsOnline() (string, bool) {
	off := s.share.Offline()
	if len(off) == 0 {
		return "", true
	}
	return offlineReason("share-partition", len(off), fmt.Sprintf("group %s %s-%d: %s", off[0].Group, off[0].Topic, off[0].Partition, off[0].Err)), false
}

func offlineReason(what string, n int, first string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s offline (KAFKA_STORAGE_ERROR): %s", what, first)
	}
	return fmt.Sprintf("%d %ss offline (KAFKA_STORAGE_ERROR), first %s", n, what, first)
}
