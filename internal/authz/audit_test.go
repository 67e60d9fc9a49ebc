package authz

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// The audit log is not a diagnostic log: an operator who quietens the
// server with --log-level warn or error must still get every denial and
// every admin change, successful ones included.
func TestAuditIgnoresLogLevel(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelWarn, slog.LevelError} {
		var buf bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))
		a := NewAudit(log)
		ctx := context.Background()
		a.Denied(ctx, "User:bob", Write, Resource{Type: Topic, Name: "orders"})
		a.Change(ctx, "User:admin", "CreateTopic", Resource{Type: Topic, Name: "orders"}, nil)
		a.Change(ctx, "User:admin", "DeleteTopic", Resource{Type: Topic, Name: "gone"}, errors.New("boom"))
		log.Info("not audit")
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 3 {
			t.Fatalf("level %v: want the 3 audit lines only, got %d:\n%s", level, len(lines), buf.String())
		}
		for i, want := range []string{`"msg":"authorization denied"`, `"outcome":"ok"`, `"outcome":"failed: boom"`} {
			if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], `"logger":"audit"`) {
				t.Errorf("level %v: line %d = %s, want %s and logger=audit", level, i, lines[i], want)
			}
		}
	}
}
