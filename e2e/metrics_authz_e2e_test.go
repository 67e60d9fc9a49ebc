package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// /metrics labels series with every topic and group name, so with
// --authorizer acl it needs DESCRIBE on the cluster: a principal that
// ListTopics filters to nothing must not read the names there.
func TestMetricsNeedClusterDescribe(t *testing.T) {
	s := newAuthzStack(t)
	s.setupTopic(t, "hidden.payroll", 1)
	s.grant(t, acl(rtTopic, "visible", opRead))

	code, raw := s.restCall(t, userToken, http.MethodGet, "/metrics", "")
	require.Equal(t, http.StatusForbidden, code, "%s", raw)
	assert.Contains(t, string(raw), "CLUSTER_AUTHORIZATION_FAILED")
	assert.NotContains(t, string(raw), "hidden.payroll")

	code, raw = s.restCall(t, adminToken, http.MethodGet, "/metrics", "")
	require.Equal(t, http.StatusOK, code, "a super user may")
	assert.True(t, strings.Contains(string(raw), "hidden.payroll"), "the series name topics")

	s.grant(t, &sharelogv1.AclBinding{Principal: userName, ResourceType: rtCluster, PatternType: literal,
		ResourceName: "kafka-cluster", Operation: opDescribe, Permission: allow})
	code, _ = s.restCall(t, userToken, http.MethodGet, "/metrics", "")
	assert.Equal(t, http.StatusOK, code, "DESCRIBE on the cluster is enough")
	code, _ = s.restCall(t, "wrong", http.MethodGet, "/metrics", "")
	assert.Equal(t, http.StatusUnauthorized, code)
}
