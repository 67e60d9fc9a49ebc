package e2e

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ShareFetch over REST: "maxRecords": 0 (or "maxBytes": 0) sent explicitly
// acquires nothing and answers at once, as Kafka; absent, the defaults
// apply.
func TestShareFetchExplicitZeroThroughREST(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	s.createTopic(t, "q", 1, nil)
	s.produceN(t, "q", 0, 3)
	r := s.rest(t, http.MethodPatch, "/v1/share-groups/g/config", `{"config":{"autoOffsetReset":"earliest"}}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)

	acquiredOf := func(r restResponse) []any {
		t.Helper()
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		resps, _ := r.Body["responses"].([]any)
		if len(resps) == 0 {
			return nil
		}
		p := resps[0].(map[string]any)["partitions"].([]any)[0].(map[string]any)
		a, _ := p["acquiredRecords"].([]any)
		return a
	}
	r = s.rest(t, http.MethodPost, "/v1/share-groups/g:fetch", `{"memberId":"m","shareSessionEpoch":0,"maxRecords":0,"maxWaitMs":60000,"topics":[{"topic":"q","partitions":[{"partition":0}]}]}`)
	assert.Empty(t, acquiredOf(r), "max_records 0: nothing, at once")
	r = s.rest(t, http.MethodPost, "/v1/share-groups/g:fetch", `{"memberId":"m","shareSessionEpoch":1,"maxBytes":0,"maxWaitMs":60000}`)
	assert.Empty(t, acquiredOf(r), "max_bytes 0: nothing, at once")
	r = s.rest(t, http.MethodPost, "/v1/share-groups/g:fetch", `{"memberId":"m","shareSessionEpoch":2}`)
	assert.Equal(t, []any{map[string]any{"firstOffset": "0", "lastOffset": "2", "deliveryCount": float64(1)}}, acquiredOf(r), "absent: the defaults")
}
