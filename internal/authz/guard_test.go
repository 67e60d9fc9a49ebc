package authz

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/principal"
)

// Each denied topic of a request is audited once, however its entries
// are ordered; allowed topics are not audited.
func TestTopicCheckerAuditsEachDenialOnce(t *testing.T) {
	acl, err := NewACL(context.Background(), &MemStore{}, nil)
	require.NoError(t, err)
	_, err = acl.Create(context.Background(), []Binding{{Principal: "User:u", ResourceType: Topic, PatternType: Literal,
		ResourceName: "ok", Operation: Read, Permission: Allow}})
	require.NoError(t, err)
	var buf bytes.Buffer
	g := NewGuard(acl, NewAudit(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := principal.WithUser(context.Background(), "User:u")
	c := g.Topics(Read)
	var got []bool
	for _, tp := range []string{"a", "a", "ok", "a", "b", "ok", "b", "a", "c"} {
		got = append(got, c.Allowed(ctx, tp))
	}
	assert.Equal(t, []bool{false, false, true, false, false, true, false, false, false}, got)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3, buf.String())
	for i, tp := range []string{"a", "b", "c"} {
		assert.Contains(t, lines[i], "resource="+tp+" ")
		assert.Contains(t, lines[i], "logger=audit")
	}
}
