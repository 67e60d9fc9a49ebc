package authz

import (
	"context"
	"log/slog"
	"time"
)

// Audit writes the audit log: one line per administrative change and per
// authorization denial, on a logger attributed logger=audit, with the
// principal, the operation, the resource and the outcome. It never sees
// credentials: callers pass the principal name only.
//
// Audit lines are written whatever the logger's level (--log-level): the
// audit trail is a record, not diagnostics, and quietening the server must
// not silently drop denials or successful changes.
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
	a.write(ctx, slog.LevelInfo, "authorization denied",
		slog.String("principal", principal), slog.String("operation", op.String()),
		slog.String("resource_type", res.Type.String()), slog.String("resource", res.Name),
		slog.String("outcome", "denied"))
}

// Unauthenticated records a call refused for its credential (a token not
// known, none where one is required, a certificate naming nobody): the
// client address, what it called and why — never the credential sent.
func (a *Audit) Unauthenticated(ctx context.Context, client, operation, reason string) {
	if a == nil {
		return
	}
	a.write(ctx, slog.LevelInfo, "authentication failed",
		slog.String("principal", "unknown"), slog.String("client", client), slog.String("operation", operation),
		slog.String("outcome", "unauthenticated: "+reason))
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
	a.write(ctx, level, "admin change", attrs...)
}

// write hands the line to the handler directly: Logger.LogAttrs would
// first ask the handler whether the level is enabled, and drop it below
// --log-level.
func (a *Audit) write(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	_ = a.log.Handler().Handle(ctx, r)
}
