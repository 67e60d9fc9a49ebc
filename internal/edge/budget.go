package edge

import (
	"context"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/sharelog/sharelog/internal/budget"
)

// BudgetHolders is a gRPC stats handler that gives every call a
// budget.Holder, so that the response bytes its handler reserves
// (internal/budget) are held until the call ends, after its response was
// written. On the gateway's own server (Tickets set) a call whose
// metadata names an open ticket uses the gateway's Holder instead, which
// the gateway releases once it has written the HTTP body.
type BudgetHolders struct {
	Enc     budget.Encoding
	Tickets *budget.Tickets
}

type ownedHolderKey struct{}

// TagRPC implements stats.Handler.
func (b BudgetHolders) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	if b.Tickets != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		if h := b.Tickets.Holder(lastMD(md, budget.MDTicket)); h != nil {
			return budget.WithHolder(ctx, h)
		}
	}
	h := budget.NewHolder(b.Enc)
	return budget.WithHolder(context.WithValue(ctx, ownedHolderKey{}, h), h)
}

// HandleRPC implements stats.Handler: the end of a call releases its
// Holder (unless the gateway holds it).
func (BudgetHolders) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.End); ok {
		if h, ok := ctx.Value(ownedHolderKey{}).(*budget.Holder); ok {
			h.Release()
		}
	}
}

// TagConn implements stats.Handler.
func (BudgetHolders) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (BudgetHolders) HandleConn(context.Context, stats.ConnStats) {}
