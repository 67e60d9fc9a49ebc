package app

// Cluster metrics (docs/cluster.md "Metrics"): what an operator needs to
// see of an instance in a cluster — its role and term, what it owns, its
// forwarded calls by outcome, its NATS connection, the partitions it
// cannot write.

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/cluster"
)

// forwardOutcomes are the outcome label values of
// sharelog_cluster_forwarded_calls_total, all registered at 0.
var forwardOutcomes = []string{"ok", "answered_error", "owner_unreachable", "outcome_unknown", "other"}

// forwardOutcome names the outcome of one forwarded call, as forwardErr
// tells them apart.
func forwardOutcome(target string, err error) string {
	if err == nil {
		return "ok"
	}
	if _, ok := status.FromError(err); !ok {
		return "owner_unreachable"
	}
	switch broker.ReasonOf(forwardErr(target, err)) {
	case apierr.OwnerUnreachable:
		return "owner_unreachable"
	case apierr.OutcomeUnknown:
		return "outcome_unknown"
	case "":
		return "other"
	}
	return "answered_error" // the owner answered with a sharelog reason
}

// forwardCounting is the forwarding connections' interceptors, counting
// every forwarded call by outcome and method.
func (n *clusterNode) forwardCounting() []grpc.DialOption {
	count := func(ctx context.Context, target, method string, err error) {
		if n.forwarded == nil {
			return
		}
		m := method[strings.LastIndexByte(method, '/')+1:]
		n.forwarded.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", forwardOutcome(target, err)), attribute.String("method", m)))
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			count(ctx, cc.Target(), method, err)
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				count(ctx, cc.Target(), method, err)
			}
			return s, err // an opened stream counts as ok once: its end is its client's
		}),
	}
}

// registerClusterMetrics registers the cluster's instruments, every
// series present from the start (at 0 where nothing happened yet):
//
//	sharelog_cluster_role{role}                    1 for the current role
//	sharelog_cluster_lease_epoch                   the term of the active lease (active-standby)
//	sharelog_cluster_owned_items{kind}             partitions and groups this instance owns (partitioned)
//	sharelog_cluster_partitions_unwritable         partitions whose last append failed (--nats-write-timeout)
//	sharelog_cluster_forwarded_calls_total{outcome,method}
//	sharelog_nats_connected                        1 while connected
//	sharelog_nats_reconnects_total
//	sharelog_nats_rtt_seconds                      the last measured round trip
func (n *clusterNode) registerClusterMetrics(mp metric.MeterProvider) error {
	meter := mp.Meter("github.com/sharelog/sharelog/internal/app")
	var err error
	if n.forwarded, err = meter.Int64Counter("sharelog.cluster.forwarded_calls",
		metric.WithDescription("Calls forwarded to the instance that owns what they name, by outcome: ok, answered_error (the owner answered with a reason), owner_unreachable (not delivered), outcome_unknown (sent, the answer lost), other."),
		metric.WithUnit("{call}")); err != nil {
		return err
	}
	for _, o := range forwardOutcomes {
		n.forwarded.Add(context.Background(), 0, metric.WithAttributes(attribute.String("outcome", o), attribute.String("method", "")))
	}
	role, err := meter.Int64ObservableGauge("sharelog.cluster.role",
		metric.WithDescription("1 for this instance's current cluster role (active, standby or disconnected; partitioned instances report active while they serve), 0 for the others."))
	if err != nil {
		return err
	}
	epoch, err := meter.Int64ObservableGauge("sharelog.cluster.lease_epoch",
		metric.WithDescription("The term of this instance's active lease (the lease revision it began at; renewals do not change it); 0 when not active."))
	if err != nil {
		return err
	}
	owned, err := meter.Int64ObservableGauge("sharelog.cluster.owned_items",
		metric.WithDescription("Partitions and groups this instance owns (partitioned mode; 0 otherwise)."), metric.WithUnit("{item}"))
	if err != nil {
		return err
	}
	unwritable, err := meter.Int64ObservableGauge("sharelog.cluster.partitions_unwritable",
		metric.WithDescription("Partitions whose last append failed with a storage error and none succeeded since (within 30 s): /readyz names them."),
		metric.WithUnit("{partition}"))
	if err != nil {
		return err
	}
	connected, err := meter.Int64ObservableGauge("sharelog.nats.connected",
		metric.WithDescription("1 while the NATS connection is up, 0 while it is reconnecting or closed."))
	if err != nil {
		return err
	}
	reconnects, err := meter.Int64ObservableCounter("sharelog.nats.reconnects",
		metric.WithDescription("Reconnections of the NATS connection."), metric.WithUnit("{reconnect}"))
	if err != nil {
		return err
	}
	rtt, err := meter.Float64ObservableGauge("sharelog.nats.rtt",
		metric.WithDescription("The round trip to the NATS server, measured every health interval (0 while disconnected)."), metric.WithUnit("s"))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		r, _, serving := n.status()
		for _, name := range []cluster.Role{cluster.Active, cluster.Standby, cluster.Disconnected} {
			v := int64(0)
			if name == r {
				v = 1
			}
			o.ObserveInt64(role, v, metric.WithAttributes(attribute.String("role", name.String())))
		}
		n.mu.RLock()
		e := int64(0)
		if r == cluster.Active && serving {
			e = int64(n.term) // the term, not the revision each renewal moves
		}
		var items map[string]uint64
		if n.part != nil && n.part.items != nil {
			items = n.part.items.Held()
		}
		n.mu.RUnlock()
		o.ObserveInt64(epoch, e)
		parts, groups := 0, 0
		for it := range items {
			if strings.HasPrefix(it, "p/") {
				parts++
			} else {
				groups++
			}
		}
		o.ObserveInt64(owned, int64(parts), metric.WithAttributes(attribute.String("kind", "partition")))
		o.ObserveInt64(owned, int64(groups), metric.WithAttributes(attribute.String("kind", "group")))
		o.ObserveInt64(unwritable, int64(n.unwritableCount()))
		up := int64(0)
		if n.nc.IsConnected() {
			up = 1
		}
		o.ObserveInt64(connected, up)
		o.ObserveInt64(reconnects, int64(n.nc.Stats().Reconnects))
		o.ObserveFloat64(rtt, time.Duration(n.lastRTT.Load()).Seconds())
		return nil
	}, role, epoch, owned, unwritable, connected, reconnects, rtt)
	return err
}

// measureRTT measures the NATS round trip every interval until ctx ends,
// for sharelog_nats_rtt_seconds (0 while disconnected).
func (n *clusterNode) measureRTT(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var d time.Duration
		if n.nc.IsConnected() {
			if rtt, err := n.nc.RTT(); err == nil {
				d = rtt
			}
		}
		n.lastRTT.Store(int64(d))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
