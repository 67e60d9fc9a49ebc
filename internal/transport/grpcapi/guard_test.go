package grpcapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
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
