package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

const (
	defaultAddr    = "127.0.0.1:9090"
	defaultTimeout = 10 * time.Second
	envAddr        = "SHARELOG_ADDR"
	envToken       = "SHARELOG_TOKEN"

	outputText = "text"
	outputJSON = "json"

	// maxRecvMsgSize bounds one response; Fetch answers about max_bytes (1 MiB by default) but
	// always returns a first record even when it is larger.
	maxRecvMsgSize = 64 << 20
)

// app holds the global flags and the streams of one invocation.
type app struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer

	addr     string
	timeout  time.Duration
	output   string
	verbose  bool
	useTLS   bool
	caFile   string
	certFile string
	keyFile  string
	token    string

	conn *grpc.ClientConn
}

// reportedError is a command error already printed to stderr.
type reportedError struct{ err error }

func (e reportedError) Error() string { return e.err.Error() }
func (e reportedError) Unwrap() error { return e.err }

// run executes sharelogctl with args and returns the process exit code: 0 on success, 1 on any
// error (usage, client-side validation, request-level or per-partition errors).
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd(stdin, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var reported reportedError
	if !errors.As(err, &reported) {
		// Raised by cobra before the command ran: bad flag, wrong number of arguments...
		fmt.Fprintf(stderr, "error: %v\n", err)
		if cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return 1
}

// newRootCmd builds the command tree. Errors of a command are printed to stderr by the command
// itself and returned; see run for the exit code.
func newRootCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "sharelogctl",
		Short: "Command-line client of the sharelog server",
		Long: `sharelogctl talks to a sharelog server over gRPC: it manages topics, produces and
fetches records, and purges records below an offset (Kafka DeleteRecords).

Request-level errors are printed to stderr as "error: <message> (<REASON>)" and make
sharelogctl exit with status 1. A server that cannot be reached within --timeout
(connecting included) is reported as UNAVAILABLE.`,
		Example: `  sharelogctl topics create orders --partitions 3
  printf 'k1\tv1\nv2\n' | sharelogctl produce orders
  sharelogctl fetch orders --partition 0 --follow
  SHARELOG_ADDR=10.0.0.5:9090 sharelogctl topics list --output json`,
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.resolveGlobals(cmd)
		},
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("sharelogctl {{.Version}}\n")

	f := root.PersistentFlags()
	f.StringVar(&a.addr, "addr", defaultAddr, "gRPC address of the server (env "+envAddr+")")
	f.DurationVar(&a.timeout, "timeout", defaultTimeout, "timeout of each call to the server, connecting included (0 = none)")
	f.StringVarP(&a.output, "output", "o", outputText, "output format: text or json (protojson, one object per line)")
	f.BoolVarP(&a.verbose, "verbose", "v", false, "print more: produced offsets, error metadata")
	f.BoolVar(&a.useTLS, "tls", false, "connect with TLS (system roots unless --ca-file)")
	f.StringVar(&a.caFile, "ca-file", "", "PEM file of the CA that signed the server certificate (implies --tls)")
	f.StringVar(&a.certFile, "cert-file", "", "PEM client certificate for mutual TLS (implies --tls)")
	f.StringVar(&a.keyFile, "key-file", "", "PEM key of --cert-file")
	f.StringVar(&a.token, "token", "", "bearer token sent with every call (env "+envToken+")")

	root.AddCommand(
		a.topicsCmd(),
		a.produceCmd(),
		a.fetchCmd(),
		a.consumeCmd(),
		a.purgeCmd(),
		a.shareGroupsCmd(),
		a.consumerGroupsCmd(),
		a.streamCmd(),
		a.aclsCmd(),
		a.usersCmd(),
		a.clusterCmd(),
		a.versionCmd(),
	)
	return root
}

// resolveGlobals applies environment defaults and validates the global flags.
func (a *app) resolveGlobals(cmd *cobra.Command) error {
	flags := cmd.Flags()
	if !flags.Changed("addr") {
		if v := os.Getenv(envAddr); v != "" {
			a.addr = v
		}
	}
	if !flags.Changed("token") {
		if v := os.Getenv(envToken); v != "" {
			a.token = v
		}
	}
	switch a.output {
	case outputText, outputJSON:
	default:
		return fmt.Errorf("invalid --output %q: want %q or %q", a.output, outputText, outputJSON)
	}
	if a.timeout < 0 {
		return fmt.Errorf("invalid --timeout %v: must be >= 0", a.timeout)
	}
	if (a.certFile == "") != (a.keyFile == "") {
		return errors.New("--cert-file and --key-file go together")
	}
	return nil
}

// runE wraps a command body: it prints the body's error to stderr, and closes the connection.
func (a *app) runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		if err != nil {
			err = a.explainUnreachable(err)
		}
		if a.conn != nil {
			_ = a.conn.Close()
			a.conn = nil
		}
		if err == nil {
			return nil
		}
		fmt.Fprintln(a.stderr, formatError(err))
		if a.verbose {
			if meta := errorMetadata(err); meta != "" {
				fmt.Fprintln(a.stderr, "  metadata:", meta)
			}
		}
		return reportedError{err}
	}
}

// explainUnreachable turns the failure of a call that never reached the server into one
// UNAVAILABLE error naming the address: a refused or failed connection (UNAVAILABLE without a
// server-sent reason), or --timeout running out while the connection was still not ready (the
// server does not answer). Errors the server sent are returned unchanged.
func (a *app) explainUnreachable(err error) error {
	if a.conn == nil {
		return err
	}
	st, ok := status.FromError(err)
	if !ok || errorInfo(st) != nil {
		return err
	}
	switch st.Code() {
	case codes.Unavailable:
		return status.Errorf(codes.Unavailable, "cannot reach the server at %s: %s", a.addr, st.Message())
	case codes.DeadlineExceeded:
		if state := a.conn.GetState(); state != connectivity.Ready {
			return status.Errorf(codes.Unavailable, "cannot reach the server at %s: no connection within --timeout %v (connection state %s)",
				a.addr, a.timeout, state)
		}
	}
	return err
}

// reasonError is a request-level error found by sharelogctl itself, before or instead of the
// server, with the reason the server gives for the same condition, so that it prints the same
// way: "error: <message> (<REASON>)".
func reasonError(c codes.Code, reason apierr.Reason, format string, args ...any) error {
	st := status.New(c, fmt.Sprintf(format, args...))
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(reason), Domain: apierr.Domain})
	if err != nil {
		return st.Err() // cannot happen: ErrorInfo always marshals
	}
	return withInfo.Err()
}

// logClient connects (lazily: the first call dials) to the server.
func (a *app) logClient() (sharelogv1.LogServiceClient, error) {
	if a.conn == nil {
		conn, err := a.dial()
		if err != nil {
			return nil, err
		}
		a.conn = conn
	}
	return sharelogv1.NewLogServiceClient(a.conn), nil
}

// describeTopics describes each topic, each call bounded by --timeout. Commands built on a
// client library that retries transport failures and waits for partitions (consume, stream)
// call it first, so that an unreachable server or a missing topic fails the command at once
// instead of leaving it waiting forever.
func (a *app) describeTopics(ctx context.Context, topics ...string) ([]*sharelogv1.Topic, error) {
	client, err := a.logClient()
	if err != nil {
		return nil, err
	}
	out := make([]*sharelogv1.Topic, 0, len(topics))
	for _, name := range topics {
		callCtx, cancel := a.callCtx(ctx)
		t, err := client.DescribeTopic(callCtx, &sharelogv1.DescribeTopicRequest{Name: name})
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func (a *app) dial() (*grpc.ClientConn, error) { return a.dialAddr(a.addr) }

// dialAddr connects to addr with the command's credentials (--addr's, or
// another instance of a cluster: the share consumer's session on each
// partition's owner).
func (a *app) dialAddr(addr string) (*grpc.ClientConn, error) {
	secure := a.useTLS || a.caFile != "" || a.certFile != ""
	creds := insecure.NewCredentials()
	if secure {
		cfg, err := a.tlsConfig()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent("sharelogctl/" + versionString()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgSize)),
	}
	if a.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken{token: a.token, secure: secure}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("invalid address %q: %w", addr, err)
	}
	return conn, nil
}

func (a *app) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if a.caFile != "" {
		pem, err := os.ReadFile(a.caFile)
		if err != nil {
			return nil, fmt.Errorf("reading --ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate found", a.caFile)
		}
		cfg.RootCAs = pool
	}
	if a.certFile != "" {
		cert, err := tls.LoadX509KeyPair(a.certFile, a.keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// bearerToken sends "authorization: Bearer <token>" with every call.
type bearerToken struct {
	token  string
	secure bool
}

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false so that a token also works against a plaintext server on
// loopback; with --tls it travels encrypted.
func (b bearerToken) RequireTransportSecurity() bool { return false }

// callCtx bounds one call by --timeout.
func (a *app) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.timeout)
}

func (a *app) jsonOutput() bool { return a.output == outputJSON }

// printJSON writes m as protojson on one line. Unpopulated fields are emitted, as the REST
// gateway does, so that scripts can rely on every field being present.
func (a *app) printJSON(m proto.Message) error {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	// protojson randomizes whitespace on purpose; compact it for stable, one-line output.
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = a.stdout.Write(buf.Bytes())
	return err
}

// printJSONWith prints m as printJSON does, with one more field first: "name":rawValue
// (rawValue is JSON already).
func (a *app) printJSONWith(m proto.Message, name, rawValue string) error {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	obj := buf.Bytes()
	var line bytes.Buffer
	line.WriteString(`{"` + name + `":` + rawValue)
	if len(obj) > 2 {
		line.WriteByte(',')
	}
	line.Write(obj[1:])
	line.WriteByte('\n')
	_, err = a.stdout.Write(line.Bytes())
	return err
}

// formatError renders err as "error: <message> (<REASON>)" for gRPC statuses, the reason being
// the google.rpc.ErrorInfo reason when the server sent one and the gRPC code name otherwise.
func formatError(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return "error: " + err.Error()
	}
	reason := code.Code_name[int32(st.Code())]
	if reason == "" {
		reason = st.Code().String()
	}
	if info := errorInfo(st); info != nil && info.GetReason() != "" {
		reason = info.GetReason()
	}
	msg := st.Message()
	// A status wrapped with context ("describe: rpc error: code = NotFound desc = ..."):
	// keep the context, drop the "rpc error" boilerplate.
	var inner interface {
		error
		GRPCStatus() *status.Status
	}
	if errors.As(err, &inner) && inner != err {
		msg = strings.Replace(err.Error(), inner.Error(), inner.GRPCStatus().Message(), 1)
	}
	return fmt.Sprintf("error: %s (%s)", msg, reason)
}

// errorMetadata renders the ErrorInfo metadata of err as "k=v k=v", sorted by key.
func errorMetadata(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	info := errorInfo(st)
	if info == nil || len(info.GetMetadata()) == 0 {
		return ""
	}
	keys := make([]string, 0, len(info.GetMetadata()))
	for k := range info.GetMetadata() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + info.GetMetadata()[k]
	}
	return strings.Join(parts, " ")
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// errorCodeName turns ERROR_CODE_POLICY_VIOLATION into POLICY_VIOLATION.
func errorCodeName(c sharelogv1.ErrorCode) string {
	return strings.TrimPrefix(c.String(), "ERROR_CODE_")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
