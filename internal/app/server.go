// Package app wires sharelog's process and holds its cluster routing.
//
// Wiring (server.go, config*.go): Start opens the log store and the share
// state, builds one domain backend over them (backend.go, for both
// modes), and serves it on every listener — the gRPC server with health
// and reflection (internal/transport/grpcapi), the REST gateway dialing a
// second, in-memory gRPC server so that streaming works through it
// (internal/transport/httpgw), and the Kafka listener
// (internal/transport/kafkawire) — with OpenTelemetry, TLS and graceful
// shutdown. Authorization (docs/security.md): Start opens the ACL bindings
// of the data dir (internal/authz) and hands every service one
// authz.Guard, which enforces them with --authorizer acl and writes the
// audit log in every mode.
//
// What the listeners share comes from internal/edge, built once here: the
// Authenticator (tokens file, client certificates), the gRPC Gate of each
// gRPC server, the connection limits at accept (every listener, Kafka's
// included), the per-IP probe limits,
// trusted proxies, and the refusal to serve beyond loopback in the clear
// (exposedListeners maps the configuration onto it; see docs/server-flags.md
// "Limits and exposure").
//
// Also here:
//   - health.go: readiness checks behind /readyz and gRPC health;
//   - metrics.go: connection refusals, storage errors, offline partitions,
//     waiting long polls; domainmetrics.go and purgemetrics.go: the log,
//     share groups, change streams, compaction and purges;
//   - describe.go: the cluster view DescribeCluster answers with, in file
//     mode and on the active instance.
//
// Cluster routing (--store jetstream, docs/cluster.md) is in cluster.go
// (the lease-driven active backend, fencing, roles in readiness),
// forward.go (standbys forward every routed call to the active instance),
// and partitioned.go, owners.go and groups.go (partitioned mode: each
// partition and group served at its owner); kafka.go is the Kafka
// listener's view of the cluster (brokers, leaders, coordinators).
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/budget"
	"github.com/sharelog/sharelog/internal/changestream"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/storage/datadir"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/producerids"
	"github.com/sharelog/sharelog/internal/storage/scramcreds"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
	"github.com/sharelog/sharelog/internal/storage/sharestate/statelog"
	"github.com/sharelog/sharelog/internal/telemetry"
	"github.com/sharelog/sharelog/internal/transport/dcpwire"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
	"github.com/sharelog/sharelog/internal/transport/httpgw"
	"github.com/sharelog/sharelog/internal/transport/kafkawire"
	"github.com/sharelog/sharelog/internal/txn"
	"github.com/sharelog/sharelog/internal/users"
)

// Options are test and embedding hooks; the zero value is what cmd/server uses.
type Options struct {
	// Telemetry overrides how OpenTelemetry is set up (tests add span recorders).
	Telemetry telemetry.Options
	// SpanProcessors are added to the tracer provider.
	SpanProcessors []sdktrace.SpanProcessor
	// GRPCListener, when set, is served instead of listening on Config.GRPCAddr
	// (tests pass a bufconn listener). The connection limits apply to it too.
	GRPCListener net.Listener
	// DeadLetterAfterAppend, a test hook, runs after the share groups'
	// dead-letter worker appended copies and before it archives their
	// records (tests simulate a crash there).
	DeadLetterAfterAppend func()
	// ReadinessChecks are added to the server's own (see ReadinessCheck).
	ReadinessChecks []ReadinessCheck
	// ReadinessInterval is how often gRPC health follows the readiness
	// checks; 0 = DefaultReadinessInterval.
	ReadinessInterval time.Duration
	// PartitionsOffline feeds the sharelog_partitions_offline gauge until
	// the store's own count is wired.
	PartitionsOffline func() int
}

// gRPC connection keepalive (see newGRPC in Start).
const (
	grpcMaxConnectionIdle = 5 * time.Minute
	grpcKeepaliveTime     = 2 * time.Minute
	grpcKeepaliveTimeout  = 20 * time.Second
)

// Server is a running sharelog process.
type Server struct {
	cfg   Config
	log   *slog.Logger
	tel   *telemetry.Telemetry
	store *logstore.FileStore
	share *sharegroup.Manager
	// streams runs StreamChanges calls; Close ends them with SHUTDOWN first.
	streams *changestream.Manager
	// cluster is the cluster mode's ownership and forwarding (nil with the
	// file store; then store, share and streams are set instead).
	cluster *clusterNode

	grpcServer   *grpc.Server // public listener
	gatewayGRPC  *grpc.Server // in-memory listener the gateway dials
	gatewayConn  *grpc.ClientConn
	httpServer   *http.Server
	health       *health.Server
	grpcListener net.Listener
	httpListener net.Listener
	connLimits   []*edge.LimitListener // gRPC, HTTP

	auth         *edge.Authenticator
	selfCert     []byte // this instance's TLS certificate (DER), with --tls-client-ca
	metrics      *serverMetrics
	acl          *authz.ACL   // the ACL bindings (nil in cluster mode)
	users        *users.Users // the Kafka listener's SCRAM users (users.go)
	guard        *authz.Guard // authorization and audit for every handler
	longPolls    *broker.LongPolls
	budget       *budget.Bytes   // response bytes in flight (docs/operations.md "Budgets")
	tickets      *budget.Tickets // the REST gateway's hand-over of its requests' budget
	kafka        *kafkawire.Listener
	dcp          *dcpwire.Listener
	groups       *consumergroup.Coordinator // classic consumer groups (with the Kafka listener)
	txn          *txn.Coordinator           // Kafka transactions (file-store mode, with the Kafka listener)
	txnsUsed     atomic.Bool                // the data has transactional records (transactionsUsed)
	fileBackend  *backend                   // the file store's backend (nil in cluster mode)
	readiness    []ReadinessCheck
	lastNotReady string         // reasons last logged; refreshHealth's goroutine only
	stopBG       chan struct{}  // closed by teardown: ends the background loops
	bg           sync.WaitGroup // the background loops

	ready    atomic.Bool
	done     chan struct{} // closed when a listener fails or Close ran
	doneOnce sync.Once
	errMu    sync.Mutex
	err      error
	closed   sync.Once
}

// Start opens the store and starts serving gRPC and HTTP. It returns once both
// listeners are bound; Close stops everything.
func Start(ctx context.Context, cfg Config, log *slog.Logger, opts ...Options) (_ *Server, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s := &Server{cfg: cfg, log: log, done: make(chan struct{}), stopBG: make(chan struct{})}
	defer func() {
		if err != nil {
			s.teardown(context.Background())
		}
	}()

	// Refuse an exposed listener before touching the data directory.
	exposed, err := exposedListeners(ctx, cfg, o.GRPCListener != nil)
	if err != nil {
		return nil, err
	}
	if len(exposed) > 0 && !cfg.InsecureAllowRemote {
		return nil, edge.ExposureError(exposed)
	}

	telOpts := o.Telemetry
	telOpts.SpanProcessors = append(telOpts.SpanProcessors, o.SpanProcessors...)
	if s.tel, err = telemetry.Setup(ctx, telOpts); err != nil {
		return nil, err
	}
	// Before the store opens, so that s.recordStorageError is its
	// Options.OnStorageError hook (and the share-state log's) from the
	// start. The offline gauge is only read at scrape time, when s.store and
	// s.share are set (the HTTP listener starts after both).
	s.longPolls = broker.NewLongPolls(cfg.MaxLongPolls, cfg.longPollsPerPrincipal())
	s.budget = budget.New(budget.Config{Total: cfg.MaxResponseBytesInFlight,
		PerPrincipal: cfg.responseBytesPerPrincipal(), MaxFetch: cfg.MaxFetchBytes})
	s.tickets = budget.NewTickets()
	if s.metrics, err = newServerMetrics(s.tel.Meter, func() int {
		n := s.offlineCount()
		if o.PartitionsOffline != nil {
			n += o.PartitionsOffline()
		}
		return n
	}, s.longPolls.Waiting, s.budget); err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	if cfg.TLSCert != "" {
		if tlsCfg, err = edge.LoadTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA); err != nil {
			return nil, err
		}
	}
	// The principals given to bare tokens are recorded in the data dir, in
	// both store modes (docs/principals.md "Bare tokens").
	auth, err := edge.NewAuthenticator(cfg.AuthTokensFile, filepath.Join(cfg.DataDir, edge.PrincipalsFile), cfg.TLSClientCA != "", log)
	if err != nil {
		return nil, err
	}
	s.auth = auth
	trusted, err := edge.ParseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("--trusted-proxies: %w", err)
	}

	// Authorization: the audit log is written in every mode; the bindings
	// are enforced with --authorizer acl only (with none they are kept, so
	// that they can be prepared before switching).
	audit := authz.NewAudit(log)
	s.guard = authz.NewGuard(authz.AllowAll{}, audit)
	var (
		aclSvc    sharelogv1.AclServiceServer
		logSvc    sharelogv1.LogServiceServer
		shareSvc  sharelogv1.ShareGroupServiceServer
		changeSvc sharelogv1.ChangeStreamServiceServer
	)
	openSegments, err := fdBudget(cfg, log)
	if err != nil {
		return nil, err
	}
	if cfg.Cluster.Store == StoreJetStream {
		// Cluster mode: the stores open when this instance becomes active;
		// until then, and whenever it is not, calls are forwarded
		// (cluster.go). The registered services are never called.
		if s.cluster, err = s.newClusterNode(ctx, o, tlsCfg); err != nil {
			return nil, err
		}
		if err := s.cluster.registerClusterMetrics(s.tel.Meter); err != nil {
			return nil, fmt.Errorf("cluster metrics: %w", err)
		}
		logSvc, shareSvc, changeSvc = sharelogv1.UnimplementedLogServiceServer{},
			sharelogv1.UnimplementedShareGroupServiceServer{}, sharelogv1.UnimplementedChangeStreamServiceServer{}
		aclSvc = grpcapi.NewAclService(nil, "ACL bindings are not available with --store jetstream yet (docs/security.md)", s.guard)
		s.users = users.New(s.cluster.usersStore())
	} else {
		mode, err := logstore.ParseFsyncMode(cfg.Fsync)
		if err != nil {
			return nil, err
		}
		// The data directory's manifest: what the directory holds, checked
		// at start by both stores (docs/on-disk-layout.md).
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("open data dir %s: %w", cfg.DataDir, err)
		}
		man, err := datadir.Open(cfg.DataDir, log)
		if err != nil {
			return nil, fmt.Errorf("open data dir %s: %w", cfg.DataDir, err)
		}
		if s.store, err = logstore.Open(cfg.DataDir, logstore.Options{Fsync: mode, FsyncInterval: cfg.FsyncInterval, Logger: log,
			Manifest: man, AcceptLoss: cfg.RepairAcceptLoss,
			OnStorageError: s.recordStorageError, MaxOpenSegments: openSegments,
			CompactionInterval: cfg.CompactionInterval, CompactionMaxBytesPerSec: cfg.CompactionMaxBytesPerSec}); err != nil {
			return nil, fmt.Errorf("open data dir %s: %w", cfg.DataDir, err)
		}
		aclStore, err := authz.NewFileStore(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		if s.acl, err = authz.NewACL(ctx, aclStore, cfg.SuperUsers); err != nil {
			return nil, err
		}
		if cfg.Authorizer == AuthorizerACL {
			s.guard = authz.NewGuard(s.acl, audit)
			if len(cfg.SuperUsers) == 0 {
				// Not an error: bindings may already grant what is
				// needed. But on a new data dir nobody may create the
				// first binding, and a lost binding cannot be put back.
				log.Warn("--authorizer acl without --super-users: only the ACL bindings grant anything, and no principal may bypass them to repair a lost binding (docs/security.md)")
			}
		}
		aclSvc = grpcapi.NewAclService(s.acl, "", s.guard)
		scram, err := scramcreds.OpenFile(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		s.users = users.New(scram)
		store := telemetry.TraceStore(s.store, s.tel.Tracer, s.tel.Meter)
		// Share state lives in the file state log under the data directory; the
		// share-group manager sees it only as a sharestate.Store (and owns it).
		shareState, err := statelog.Open(statelog.Options{
			Dir:              filepath.Join(cfg.DataDir, "sharegroups"),
			Fsync:            mode,
			FsyncInterval:    cfg.FsyncInterval,
			Logger:           log,
			RepairShareState: cfg.RepairShareState,
			OnStorageError:   s.recordStorageError,
			Expected:         expectedShareState(man),
			OnManifest:       func(parts []sharestate.PartitionKey) { recordShareState(man, parts, log) },
		})
		if err != nil {
			return nil, fmt.Errorf("open share-group state: %w", err)
		}
		if err := s.readTransactionsUsed(cfg.DataDir); err != nil {
			_ = shareState.Close()
			return nil, err
		}
		b, err := s.openBackend(store, s.store, shareState, o, s.singleView, nil, nil, producerStore{ids: producerids.Open(cfg.DataDir)})
		if err != nil {
			return nil, err
		}
		s.share, s.streams, s.fileBackend = b.share, b.streams, b
		logSvc, shareSvc, changeSvc = b.logSvc, b.shareSv, b.change
	}
	// Served by every instance alike, never forwarded (users.go).
	userSvc := grpcapi.NewUserService(s.users, s.guard)
	s.health = health.NewServer()
	// Consumer groups keep their offsets in the data dir in file-store
	// mode, with or without the Kafka listener (gRPC/REST consumers commit
	// offsets too). In cluster mode each backend opens a coordinator over
	// the cluster's KV with the Kafka listener (cluster.go, partitioned.go)
	// and its own ConsumerGroupService, which the cluster routing calls
	// (forward.go, cgroute.go): the one registered here is never called.
	var cgSvc *grpcapi.ConsumerGroupService
	if s.fileBackend != nil {
		if s.groups, err = openConsumerGroups(cfg, s.fileBackend.logAPI, s.share, log); err != nil {
			return nil, err
		}
		cgSvc = grpcapi.NewConsumerGroupService(s.groups, "", s.guard)
	} else {
		cgSvc = grpcapi.NewConsumerGroupService(nil, consumerGroupsUnserved, s.guard)
	}
	if cfg.KafkaAddr != "" {
		kln, err := net.Listen("tcp", cfg.KafkaAddr)
		if err != nil {
			return nil, fmt.Errorf("listen on --kafka-addr %s: %w", cfg.KafkaAddr, err)
		}
		kcfg := kafkawire.Config{
			Listener:         edge.NewLimitListener(kln, "kafka", cfg.MaxConnections, cfg.MaxConnectionsPerIP, log, s.metrics.connRefused),
			AdvertisedAddr:   cfg.KafkaAdvertisedAddr,
			AutoCreateTopics: cfg.KafkaAutoCreateTopics, DefaultPartitions: int32(cfg.KafkaDefaultPartitions),
			MaxRequestBytes: int32(cfg.KafkaMaxRequestBytes), DataDir: cfg.DataDir,
			IdleTimeout: cfg.KafkaIdleTimeout, RequestTimeout: cfg.KafkaRequestTimeout,
			Share: s.share, Groups: s.groups, Logger: log, Budget: s.budget,
			TLS: tlsCfg, Auth: auth, SASLSessionLifetime: cfg.KafkaSASLSessionLifetime,
			SASLMechanisms: cfg.kafkaSASLMechanisms(), Users: s.users,
			Guard: s.guard, ACL: s.acl, DLQAutoCreate: cfg.DLQAutoCreateTopics,
		}
		if s.fileBackend != nil && s.groups != nil {
			if s.txn, err = openTransactions(cfg, s.fileBackend.logAPI, s.groups, log); err != nil {
				kln.Close()
				return nil, err
			}
			kcfg.Txn = s.txn
		}
		var logAPI *broker.Log
		if s.cluster != nil {
			// Cluster mode: each call is served by the backend the lease
			// opened here, and partitions and groups led elsewhere are
			// answered as Kafka brokers do (kafka.go).
			s.cluster.kafka = newKafkaCluster(s.cluster)
			kcfg.Cluster = s.cluster.kafka
		} else {
			logAPI = s.fileBackend.logAPI
		}
		if s.kafka, err = kafkawire.Listen(kcfg, logAPI); err != nil {
			kln.Close()
			return nil, fmt.Errorf("kafka listener on --kafka-addr %s: %w", cfg.KafkaAddr, err)
		}
	}
	if cfg.DCPAddr != "" {
		// The DCP listener (docs/dcp.md): the Kafka listener's connection
		// limits, TLS, authentication and SCRAM users over the change
		// streams and the log domain of the file store, or in cluster
		// mode of the backend the lease opened here (dcp.go).
		dln, err := net.Listen("tcp", cfg.DCPAddr)
		if err != nil {
			return nil, fmt.Errorf("listen on --dcp-addr %s: %w", cfg.DCPAddr, err)
		}
		dcfg := dcpwire.Config{
			Listener:       edge.NewLimitListener(dln, "dcp", cfg.MaxConnections, cfg.MaxConnectionsPerIP, log, s.metrics.connRefused),
			AdvertisedAddr: cfg.DCPAdvertisedAddr,
			TLS:            tlsCfg, Auth: auth, SASLMechanisms: cfg.kafkaSASLMechanisms(), Users: s.users,
			Guard: s.guard, Logger: log,
		}
		var logAPI *broker.Log
		if s.cluster != nil {
			s.cluster.dcp = newDCPCluster(s.cluster)
			dcfg.Cluster = s.cluster.dcp
		} else {
			logAPI = s.fileBackend.logAPI
		}
		s.dcp, err = dcpwire.Listen(dcfg, logAPI, s.streams)
		if err != nil {
			dln.Close()
			return nil, fmt.Errorf("dcp listener on --dcp-addr %s: %w", cfg.DCPAddr, err)
		}
	}
	if err := registerDomainMetrics(s.tel.Meter, s.domainSources); err != nil {
		return nil, err
	}
	if err := registerSegmentFileMetrics(s.tel.Meter, s.store); err != nil {
		return nil, err
	}
	healthLimit, healthBurst := rate.Limit(cfg.HealthProbesPerSec), 2*cfg.HealthProbesPerSec
	if cfg.HealthProbesPerSec == 0 {
		healthLimit = rate.Inf
	}
	healthLimiter := edge.NewIPLimiter(healthLimit, healthBurst, healthLimiterIPs)
	healthWatches := edge.NewIPSlots(HealthWatchesPerIP)
	// Inside the call logger (which logs the final status), around
	// everything else: the one place where errors become gRPC statuses.
	errs := grpcapi.Errors{Log: log}
	// With client certificates, a peer presenting this instance's own
	// certificate is another instance of the cluster forwarding a call.
	var selfCert []byte
	if tlsCfg != nil && auth.ClientCerts() && len(tlsCfg.Certificates) > 0 && len(tlsCfg.Certificates[0].Certificate) > 0 {
		selfCert = tlsCfg.Certificates[0].Certificate[0]
		s.selfCert = selfCert
	}
	newGRPC := func(creds credentials.TransportCredentials, viaGateway bool) *grpc.Server {
		g := edge.NewGate(edge.GateConfig{Auth: auth, Health: healthLimiter, HealthWatches: healthWatches, Audit: audit,
			Trusted: trusted, ViaGateway: viaGateway, Self: selfCert})
		gs := grpc.NewServer(
			grpc.Creds(creds),
			grpc.MaxRecvMsgSize(cfg.MaxRequestBytes),
			grpc.ForceServerCodecV2(g.Codec()),
			// Reused handler goroutines keep their grown stacks: a new
			// goroutine per call pays stack growth on every RPC.
			grpc.NumStreamWorkers(uint32(runtime.NumCPU())),
			grpc.StatsHandler(otelgrpc.NewServerHandler(
				otelgrpc.WithTracerProvider(s.tel.Tracer), otelgrpc.WithMeterProvider(s.tel.Meter))),
			// The response bytes a call reserves are held until it ends.
			grpc.StatsHandler(budgetHolders(viaGateway, s.tickets)),
			// Clients may ping every 10 s, idle or not; faster pingers are
			// disconnected.
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
			// A connection without calls for grpcMaxConnectionIdle is
			// closed (clients reconnect on their next call); a silent peer
			// is pinged after grpcKeepaliveTime and dropped if it does not
			// answer, so dead connections do not hold descriptors.
			grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: grpcMaxConnectionIdle,
				Time: grpcKeepaliveTime, Timeout: grpcKeepaliveTimeout}),
			grpc.MaxConcurrentStreams(uint32(cfg.GRPCMaxConcurrentStreams)),
			grpc.ChainUnaryInterceptor(s.withCluster([]grpc.UnaryServerInterceptor{
				recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(s.recovered)),
				edge.CallLogger{Log: log}.Unary,
				errs.Unary,
				g.Unary,
			})...),
			grpc.ChainStreamInterceptor(s.withClusterStream([]grpc.StreamServerInterceptor{
				recovery.StreamServerInterceptor(recovery.WithRecoveryHandlerContext(s.recovered)),
				edge.CallLogger{Log: log}.Stream,
				errs.Stream,
				g.Stream,
			})...),
		)
		sharelogv1.RegisterLogServiceServer(gs, logSvc)
		sharelogv1.RegisterShareGroupServiceServer(gs, shareSvc)
		sharelogv1.RegisterChangeStreamServiceServer(gs, changeSvc)
		sharelogv1.RegisterAclServiceServer(gs, aclSvc)
		sharelogv1.RegisterUserServiceServer(gs, userSvc)
		sharelogv1.RegisterConsumerGroupServiceServer(gs, cgSvc)
		healthpb.RegisterHealthServer(gs, s.health)
		reflection.Register(gs)
		return gs
	}
	publicCreds := insecure.NewCredentials()
	if tlsCfg != nil {
		publicCreds = credentials.NewTLS(tlsCfg)
	}
	s.grpcServer = newGRPC(publicCreds, false)
	// The gateway dials a second gRPC server on an in-memory listener: the same
	// handlers and interceptors, but no TLS to terminate twice and no
	// dependence on the public address being dialable.
	s.gatewayGRPC = newGRPC(insecure.NewCredentials(), true)
	if s.cluster != nil {
		s.readiness = append(s.readiness, s.cluster.readinessChecks()...)
	} else {
		s.readiness = append(s.readiness,
			ReadinessCheck{Service: sharelogv1.LogService_ServiceDesc.ServiceName, Check: s.partitionsOnline},
			ReadinessCheck{Service: sharelogv1.ShareGroupService_ServiceDesc.ServiceName, Check: s.sharePartitionsOnline})
	}
	s.readiness = append(s.readiness, o.ReadinessChecks...)
	s.refreshHealth()

	if s.grpcListener = o.GRPCListener; s.grpcListener == nil {
		if s.grpcListener, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			return nil, fmt.Errorf("listen on --grpc-addr %s: %w", cfg.GRPCAddr, err)
		}
	}
	if s.httpListener, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("listen on --http-addr %s: %w", cfg.HTTPAddr, err)
	}
	grpcLimit := edge.NewLimitListener(s.grpcListener, "grpc", cfg.MaxConnections, cfg.MaxConnectionsPerIP, log, s.metrics.connRefused)
	httpLimit := edge.NewLimitListener(s.httpListener, "http", cfg.MaxConnections, cfg.MaxConnectionsPerIP, log, s.metrics.connRefused)
	s.connLimits = []*edge.LimitListener{grpcLimit, httpLimit}
	memListener := bufconn.Listen(1 << 20)
	if s.gatewayConn, err = grpc.NewClient("passthrough:///sharelog-gateway",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return memListener.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(s.tel.Tracer), otelgrpc.WithMeterProvider(s.tel.Meter))),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(cfg.MaxRequestBytes+4096), grpc.MaxCallRecvMsgSize(1<<30)),
	); err != nil {
		return nil, fmt.Errorf("gateway client: %w", err)
	}
	handler, err := httpgw.NewHandler(ctx, s.gatewayConn, httpgw.Deps{
		MaxRequestBytes: int64(cfg.MaxRequestBytes),
		ReadTimeout:     cfg.HTTPReadTimeout,
		Metrics:         s.tel.Metrics,
		Readyz:          s.readyz,
		Health:          healthLimiter,
		Auth:            auth,
		Guard:           s.guard,
		Audit:           audit,
		Trusted:         trusted,
		Tracer:          s.tel.Tracer,
		Meter:           s.tel.Meter,
		Tickets:         s.tickets,
	})
	if err != nil {
		return nil, err
	}
	// No ReadTimeout: the handler bounds bodies per request (Deps.ReadTimeout).
	s.httpServer = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: cfg.HTTPIdleTimeout,
		TLSConfig: tlsCfg, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}

	interval := o.ReadinessInterval
	if interval <= 0 {
		interval = DefaultReadinessInterval
	}
	s.bg.Go(func() { s.healthLoop(interval, s.stopBG) })
	if auth.TokensEnabled() {
		s.bg.Go(func() { auth.Watch(s.stopBG) })
	}
	if len(exposed) > 0 {
		edge.WarnExposed(log, exposed)
		s.bg.Go(func() { edge.ExposureLoop(log, exposed, edge.InsecureWarnInterval, s.stopBG) })
	}

	go s.serve("grpc", func() error { return s.grpcServer.Serve(grpcLimit) })
	go s.serve("gateway-grpc", func() error { return s.gatewayGRPC.Serve(memListener) })
	go s.serve("http", func() error {
		if tlsCfg != nil {
			return s.httpServer.ServeTLS(httpLimit, "", "")
		}
		return s.httpServer.Serve(httpLimit)
	})
	if s.cluster != nil {
		s.cluster.start(s.GRPCAddr())
	}
	s.ready.Store(true)
	log.Info("sharelog serving", "grpc_addr", s.GRPCAddr(), "http_addr", s.HTTPAddr(), "kafka_addr", s.KafkaAddr(), "dcp_addr", s.DCPAddr(),
		"console", consoleURL(s.HTTPAddr(), tlsCfg != nil), "trace_exporter", s.tel.TraceExporter,
		"data_dir", cfg.DataDir, "fsync", cfg.Fsync, "tls", tlsCfg != nil, "auth", auth.Enabled(), "client_certs", auth.ClientCerts(),
		"authorizer", cfg.Authorizer, "max_connections", cfg.MaxConnections, "max_connections_per_ip", cfg.MaxConnectionsPerIP, "max_long_polls", cfg.MaxLongPolls,
		"max_long_polls_per_principal", cfg.longPollsPerPrincipal(), "max_response_bytes_in_flight", cfg.MaxResponseBytesInFlight,
		"max_response_bytes_per_principal", cfg.responseBytesPerPrincipal(), "max_fetch_bytes", cfg.MaxFetchBytes)
	return s, nil
}

// consoleURL is the web console's address on the HTTP listener addr, for the
// startup line (a listener on every interface is named by localhost).
func consoleURL(addr string, tls bool) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/ui/"
}

func (s *Server) serve(name string, fn func() error) {
	if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
		s.log.Error("listener failed", "listener", name, "err", err)
		s.errMu.Lock()
		if s.err == nil {
			s.err = fmt.Errorf("%s listener: %w", name, err)
		}
		s.errMu.Unlock()
		s.doneOnce.Do(func() { close(s.done) })
	}
}

func (s *Server) recovered(ctx context.Context, p any) error {
	s.log.ErrorContext(ctx, "panic in handler", "panic", p)
	return status.Error(codes.Internal, "internal error")
}

// ReloadAuth re-reads --auth-tokens-file now (cmd/server calls it on
// SIGHUP; the file is also watched for changes). A file that cannot be read
// or parsed keeps the tokens in force; the error is logged and returned.
func (s *Server) ReloadAuth() error { return s.auth.Reload() }

// HTTPHandler is the whole HTTP surface (tests serve it with httptest).
func (s *Server) HTTPHandler() http.Handler { return s.httpServer.Handler }

// GRPCAddr is the bound gRPC address (useful with port 0).
func (s *Server) GRPCAddr() string { return s.grpcListener.Addr().String() }

// DCPAddr is the bound DCP listener address, empty when it is off.
func (s *Server) DCPAddr() string {
	if s.dcp == nil {
		return ""
	}
	return s.dcp.Addr().String()
}

// KafkaAddr is the bound Kafka listener address, empty when it is off.
func (s *Server) KafkaAddr() string {
	if s.kafka == nil {
		return ""
	}
	return s.kafka.Addr().String()
}

// HTTPAddr is the bound HTTP address (useful with port 0).
func (s *Server) HTTPAddr() string { return s.httpListener.Addr().String() }

// Done is closed when a listener fails; Err then says why.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is the listener failure that closed Done, if any.
func (s *Server) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close stops accepting, finishes in-flight calls (bounded by the shutdown
// timeout), flushes and closes the store, and flushes telemetry.
func (s *Server) Close() error {
	var err error
	s.closed.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		err = s.teardown(ctx)
		s.doneOnce.Do(func() { close(s.done) })
	})
	return err
}

func (s *Server) teardown(ctx context.Context) error {
	s.ready.Store(false)
	close(s.stopBG)
	s.bg.Wait()
	if s.streams != nil {
		// Streams end with stream_end{SHUTDOWN} at their next event and new
		// calls get UNAVAILABLE, so the graceful stops below do not wait for
		// tails (an NDJSON tail would hold the HTTP shutdown too).
		s.streams.Shutdown()
	}
	if s.cluster != nil {
		s.cluster.beginShutdown()
	}
	if s.health != nil {
		s.health.Shutdown()
	}
	var errs []error
	if s.httpServer != nil {
		if err := s.httpServer.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	} else if s.httpListener != nil {
		s.httpListener.Close()
	}
	for _, gs := range []*grpc.Server{s.grpcServer, s.gatewayGRPC} {
		if gs != nil {
			gracefulStop(ctx, gs)
		}
	}
	if s.grpcServer == nil && s.grpcListener != nil {
		s.grpcListener.Close()
	}
	if s.gatewayConn != nil {
		s.gatewayConn.Close()
	}
	// The Kafka listener ends its connections' share sessions: before the
	// share groups close.
	if s.kafka != nil {
		if err := s.kafka.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close kafka listener: %w", err))
		}
	}
	// The change streams were shut down above: the DCP streams sent their
	// STREAM_END (disconnected) at their next event.
	if s.dcp != nil {
		if err := s.dcp.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close dcp listener: %w", err))
		}
	}
	// After the listener, before the groups its commits write to.
	if s.txn != nil {
		s.txn.Close()
	}
	// After the listener, whose JoinGroup and SyncGroup calls wait in it.
	if s.groups != nil {
		if err := s.groups.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close consumer groups: %w", err))
		}
	}
	if s.cluster != nil {
		if err := s.cluster.close(); err != nil {
			errs = append(errs, err)
		}
	}
	// Share groups end their sessions through the store: close them first.
	if s.share != nil {
		if err := s.share.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close share groups: %w", err))
		}
	}
	if s.store != nil {
		if err := s.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
	}
	if s.tel != nil {
		if err := s.tel.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry shutdown: %w", err))
		}
	}
	return errors.Join(errs...)
}

// gracefulStop waits for in-flight calls until ctx ends, then cuts them.
func gracefulStop(ctx context.Context, gs *grpc.Server) {
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		gs.Stop()
		<-stopped
	}
}

// budgetHolders is the gRPC stats handler that holds each call's response
// bytes until it ends; on the gateway's server, a call of a REST request
// uses the gateway's ticket (charged as JSON, held until the body is
// written).
func budgetHolders(viaGateway bool, tickets *budget.Tickets) edge.BudgetHolders {
	if viaGateway {
		return edge.BudgetHolders{Enc: budget.JSON, Tickets: tickets}
	}
	return edge.BudgetHolders{Enc: budget.Binary}
}
