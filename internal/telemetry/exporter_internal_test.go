package telemetry

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// exporterName is what the startup line says about spans (issue 34, friction 6).
func TestExporterName(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "none"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none"}, "none"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, "console"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, "otlp http/protobuf localhost:4318"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "otlp grpc localhost:4317"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2"}, "otlp grpc http://b:2"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:3"}, "otlp http/protobuf http://c:3"},
	} {
		assert.Equal(t, tt.want, exporterName(func(k string) string { return tt.env[k] }), "%v", tt.env)
	}
}
