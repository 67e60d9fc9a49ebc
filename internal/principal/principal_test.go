package principal

import (
	"context"
	"testing"
)

func TestName(t *testing.T) {
	if got := Name(context.Background()); got != "" {
		t.Fatalf("Name of a bare context = %q, want empty", got)
	}
	ctx := WithName(context.Background(), "token-3")
	if got := Name(ctx); got != "token-3" {
		t.Fatalf("Name = %q, want token-3", got)
	}
	if got := Name(WithName(ctx, "ip:127.0.0.2")); got != "ip:127.0.0.2" {
		t.Fatalf("inner WithName must win, got %q", got)
	}
}
