package authz

import (
	"context"
	"log/slog"
)

// Audit writes the audit log: one line per administrative change and per
// authorization denial, on a logger attributed logger=audit, with the
// principal, the operation, the resource and the outcome. It never sees
// credentials: callers pass the principal name only.
type Audit struct {
	log *slog.Logger
}

// NewAudit returns the audit log over log (nil = discard).
func NewAudit(log *slog.Logger) *Audit {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Audit{log: log.With("logger", "audit")}
}

// Denied records that principal was refused op on res.
func (a *Audit) Denied(ctx context.Context, principal string, op Operation, res Resource) {
	if a == nil {
		return
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "authorization denied",
		slog.String("principal", principal), slog.String("operation", op.String()),
		slog.String("resource_type", res.Type.String()), slog.String("resource", res.Name),
		slog.String("outcome", "denied"))
}

// Change records an administrative change: action (e.g. "CreateTopic") on
// res by principal, and its outcome ("ok" or the error). detail adds
// attributes (the purged offsets, the bindings changed).
func (a *Audit) Change(ctx context.Context, principal, action string, res Resource, err error, detail ...slog.Attr) {
	if a == nil {
		return
	}
	outcome, level := "ok", slog.LevelInfo
	if err != nil {
		outcome, level = "failed: "+err.Error(), slog.LevelWarn
	}
	attrs := append([]slog.Attr{
		slog.String("principal", principal), slog.String("operation", action),
		slog.String("resource_type", res.Type.String()), slog.String("resource", res.Name),
		slog.String("outcome", outcome),
	}, detail...)
	a.log.LogAttrs(ctx, level, "admin change", attrs...)
}
