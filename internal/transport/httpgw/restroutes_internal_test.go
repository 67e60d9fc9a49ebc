package httpgw

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/gen/openapi"
)

// The route table comes from the embedded OpenAPI document: every route of
// the REST surface, its methods and its query parameters.
func TestRESTRouteTable(t *testing.T) {
	rt, err := loadRESTRoutes(openapi.JSON)
	require.NoError(t, err)
	require.NotEmpty(t, rt.routes)

	cases := []struct{ method, path, template string }{
		{http.MethodGet, "/v1/topics", "/v1/topics"},
		{http.MethodGet, "/v1/topics/orders", "/v1/topics/{name}"},
		{http.MethodPost, "/v1/topics/orders/records", "/v1/topics/{topic}/records"},
		{http.MethodGet, "/v1/topics/orders/partitions/3/records", "/v1/topics/{topic}/partitions/{partition}/records"},
		{http.MethodPost, "/v1/share-groups/g:fetch", "/v1/share-groups/{groupId}:fetch"},
		{http.MethodPost, "/v1/share-groups/g/offsets:alter", "/v1/share-groups/{groupId}/offsets:alter"},
		{http.MethodGet, "/v1/share-groups/g", "/v1/share-groups/{groupId}"},
		{http.MethodGet, "/v1/consumer-groups", "/v1/consumer-groups"},
		{http.MethodGet, "/v1/consumer-groups/g", "/v1/consumer-groups/{group}"},
		{http.MethodDelete, "/v1/consumer-groups/g", "/v1/consumer-groups/{group}"},
		{http.MethodGet, "/v1/consumer-groups/g/offsets", "/v1/consumer-groups/{group}/offsets"},
		{http.MethodPost, "/v1/consumer-groups/g/offsets:commit", "/v1/consumer-groups/{group}/offsets:commit"},
		{http.MethodPost, "/v1/consumer-groups/g/offsets:alter", "/v1/consumer-groups/{group}/offsets:alter"},
	}
	for _, c := range cases {
		r := rt.find(c.method, c.path)
		require.NotNil(t, r, "%s %s", c.method, c.path)
		assert.Equal(t, c.template, r.template, "%s %s", c.method, c.path)
	}
	assert.Nil(t, rt.find(http.MethodPut, "/v1/topics"))
	assert.Nil(t, rt.find(http.MethodGet, "/v1/topics/a/b"))
	assert.Equal(t, []string{"GET", "POST"}, rt.allowed("/v1/topics"))
	assert.Empty(t, rt.allowed("/v2/topics"))
	// The gateway matches an empty segment (/v1/topics/ is GetTopic with
	// no name): the table must too, so a wrong method there is a 405.
	assert.Equal(t, []string{"DELETE", "GET"}, rt.allowed("/v1/topics/"))

	fetch := rt.find(http.MethodGet, "/v1/topics/t/partitions/0/records")
	assert.Empty(t, fetch.unknownQuery(http.MethodGet, url.Values{"offset": {"1"}, "max_wait_ms": {"5"}, "maxBytes": {"9"}}))
	assert.Equal(t, "ofset", fetch.unknownQuery(http.MethodGet, url.Values{"offset": {"1"}, "ofset": {"1"}}))
	assert.Equal(t, "maxwaitms", fetch.unknownQuery(http.MethodGet, url.Values{"maxwaitms": {"1"}}))

	assert.Equal(t, []string{"DELETE", "GET"}, rt.allowed("/v1/consumer-groups/g"))
	assert.Equal(t, []string{"POST"}, rt.allowed("/v1/consumer-groups/g/offsets:alter"))
	offsets := rt.find(http.MethodGet, "/v1/consumer-groups/g/offsets")
	assert.Empty(t, offsets.unknownQuery(http.MethodGet, url.Values{"topics": {"a", "b"}}))
	list := rt.find(http.MethodGet, "/v1/consumer-groups")
	assert.Empty(t, list.unknownQuery(http.MethodGet, url.Values{"state": {"Stable"}, "type": {"CONSUMER_GROUP_TYPE_CLASSIC"}}))
}

func TestJSONFieldPath(t *testing.T) {
	for in, want := range map[string]string{
		"offset": "offset", "max_wait_ms": "maxWaitMs", "a_b.c_d": "aB.cD", "maxBytes": "maxBytes",
	} {
		assert.Equal(t, want, jsonFieldPath(in), in)
	}
}
