package grpcapi

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/principal"
)

// The protobuf enums of AclService and the authz types share their numbers.
func TestACLEnumsAgree(t *testing.T) {
	for n, name := range sharelogv1.ResourceType_name {
		assert.Equal(t, strings.TrimPrefix(name, "RESOURCE_TYPE_"), strings.Replace(authz.ResourceType(n).String(), "ANY", "UNSPECIFIED", 1))
	}
	for n, name := range sharelogv1.PatternType_name {
		assert.Equal(t, strings.TrimPrefix(name, "PATTERN_TYPE_"), strings.Replace(authz.PatternType(n).String(), "ANY", "UNSPECIFIED", 1))
	}
	for n, name := range sharelogv1.AclOperation_name {
		assert.Equal(t, strings.TrimPrefix(name, "ACL_OPERATION_"), strings.Replace(authz.Operation(n).String(), "ANY", "UNSPECIFIED", 1))
	}
	for n, name := range sharelogv1.AclPermission_name {
		assert.Equal(t, strings.TrimPrefix(name, "ACL_PERMISSION_"), strings.Replace(authz.Permission(n).String(), "ANY", "UNSPECIFIED", 1))
	}
	b := bindingFromProto(&sharelogv1.AclBinding{Principal: "User:a", ResourceType: 300, PatternType: 1, ResourceName: "t", Operation: 2, Permission: 1})
	assert.Error(t, b.Validate(), "an out-of-range enum number is never valid")
}

// Each denied topic of a request is audited once, however its entries
// are ordered; allowed topics are not audited.
func TestTopicCheckerAuditsEachDenialOnce(t *testing.T) {
	acl, err := authz.NewACL(context.Background(), &authz.MemStore{}, nil)
	require.NoError(t, err)
	_, err = acl.Create(context.Background(), []authz.Binding{{Principal: "User:u", ResourceType: authz.Topic, PatternType: authz.Literal,
		ResourceName: "ok", Operation: authz.Read, Permission: authz.Allow}})
	require.NoError(t, err)
	var buf bytes.Buffer
	g := NewGuard(acl, authz.NewAudit(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := principal.WithUser(context.Background(), "User:u")
	c := g.topics(authz.Read)
	var got []bool
	for _, tp := range []string{"a", "a", "ok", "a", "b", "ok", "b", "a", "c"} {
		got = append(got, c.allowed(ctx, tp))
	}
	assert.Equal(t, []bool{false, false, true, false, false, true, false, false, false}, got)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3, buf.String())
	for i, tp := range []string{"a", "b", "c"} {
		assert.Contains(t, lines[i], "resource="+tp+" ")
		assert.Contains(t, lines[i], "logger=audit")
	}
}
