package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Telemetry holds the providers the server instruments itself with.
type Telemetry struct {
	// Tracer is a no-op provider when nothing would receive spans (no
	// exporter, no span processor): every RPC and store call would otherwise
	// pay for spans that go nowhere. Incoming trace context still flows.
	Tracer  trace.TracerProvider
	Meter   *sdkmetric.MeterProvider
	sdk     *sdktrace.TracerProvider // nil when Tracer is a no-op
	Metrics http.Handler             // Prometheus text exposition
	// TraceExporter names where spans go, for the startup log line: "none",
	// "console", or "otlp <protocol> <endpoint>".
	TraceExporter string
}

// Options configure Setup. Zero values read the environment.
type Options struct {
	// Getenv reads OTEL_* variables (default os.Getenv).
	Getenv func(string) string
	// Console is where OTEL_TRACES_EXPORTER=console writes (default os.Stdout).
	Console io.Writer
	// SpanProcessors are added to the tracer provider (tests add a span recorder).
	SpanProcessors []sdktrace.SpanProcessor
}

// Setup builds the providers. OTEL_TRACES_EXPORTER selects the trace exporter:
// unset or "none" (no export), "console" (JSON to stdout), "otlp" (protocol by
// OTEL_EXPORTER_OTLP_PROTOCOL: "grpc", or "http/protobuf" by default). The
// standard OTEL_EXPORTER_OTLP_* and OTEL_SERVICE_NAME variables apply.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", serviceName(getenv))))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	exp, err := traceExporter(ctx, getenv, opts.Console)
	if err != nil {
		return nil, err
	}
	if exp != nil {
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
	}
	for _, sp := range opts.SpanProcessors {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(sp))
	}
	var (
		tp  trace.TracerProvider = noop.NewTracerProvider()
		sdk *sdktrace.TracerProvider
	)
	if exp != nil || len(opts.SpanProcessors) > 0 {
		sdk = sdktrace.NewTracerProvider(tpOpts...)
		tp = sdk
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Without the otel_scope_* labels: every series carried three of them,
	// which say only which instrumentation scope made it.
	promExp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(promExp))

	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return &Telemetry{
		Tracer:        tp,
		sdk:           sdk,
		Meter:         mp,
		Metrics:       promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		TraceExporter: exporterName(getenv),
	}, nil
}

// Shutdown flushes spans and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var err error
	if t.sdk != nil {
		err = t.sdk.Shutdown(ctx)
	}
	return errors.Join(err, t.Meter.Shutdown(ctx))
}

func serviceName(getenv func(string) string) string {
	if n := getenv("OTEL_SERVICE_NAME"); n != "" {
		return n
	}
	return "sharelog"
}

// exporterName describes the exporter traceExporter builds from the same
// variables (which it has validated).
func exporterName(getenv func(string) string) string {
	switch kind := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); kind {
	case "", "none":
		return "none"
	case "otlp":
		proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
		if endpoint == "" {
			endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		}
		if proto == "" {
			proto = "http/protobuf"
		}
		if endpoint == "" {
			endpoint = "localhost:4318" // the exporters' defaults
			if proto == "grpc" {
				endpoint = "localhost:4317"
			}
		}
		return "otlp " + proto + " " + endpoint
	default:
		return kind
	}
}

func traceExporter(ctx context.Context, getenv func(string) string, console io.Writer) (sdktrace.SpanExporter, error) {
	switch kind := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); kind {
	case "", "none":
		return nil, nil
	case "console":
		if console == nil {
			console = os.Stdout
		}
		return stdouttrace.New(stdouttrace.WithWriter(console))
	case "otlp":
		proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch proto {
		case "grpc":
			return otlptracegrpc.New(ctx)
		case "", "http/protobuf":
			return otlptracehttp.New(ctx)
		default:
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q is not supported (use grpc or http/protobuf)", proto)
		}
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q is not supported (use otlp, console or none)", kind)
	}
}
