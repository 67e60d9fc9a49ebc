package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// The minimal OpenAPI 3 shapes the tests read.
type (
	oasDoc struct {
		OpenAPI    string                          `json:"openapi"`
		Info       struct{ Title, Version string } `json:"info"`
		Servers    []struct{ URL string }          `json:"servers"`
		Security   []map[string][]string           `json:"security"`
		Paths      map[string]map[string]oasOp     `json:"paths"`
		Components struct {
			Schemas         map[string]oasSchema `json:"schemas"`
			SecuritySchemes map[string]struct {
				Type, Scheme string
			} `json:"securitySchemes"`
		} `json:"components"`
	}
	oasOp struct {
		OperationID string                 `json:"operationId"`
		Responses   map[string]oasResponse `json:"responses"`
	}
	oasResponse struct {
		Description string `json:"description"`
		Content     map[string]struct {
			Schema oasSchema `json:"schema"`
		} `json:"content"`
	}
	oasSchema struct {
		Ref        string               `json:"$ref"`
		Properties map[string]oasSchema `json:"properties"`
	}
)

const (
	changesPath   = "/v1/topics/{topic}/partitions/{partition}/changes"
	statusRef     = "#/components/schemas/rpcStatus"
	streamLineRef = "#/components/schemas/v1ChangeEventStreamLine"
)

// getOpenAPI fetches /openapi.json and decodes it.
func getOpenAPI(t *testing.T, s *stack) oasDoc {
	t.Helper()
	resp, err := s.http.Client().Get(s.http.URL + "/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(len(raw)), resp.Header.Get("Content-Length"))
	var doc oasDoc
	require.NoError(t, json.Unmarshal(raw, &doc))
	return doc
}

// operation finds an operation of the document by path and method.
func (d oasDoc) operation(t *testing.T, path, method string) oasOp {
	t.Helper()
	op, ok := d.Paths[path][strings.ToLower(method)]
	require.True(t, ok, "no %s %s in the document", method, path)
	return op
}

// TestOpenAPIDocument: /openapi.json is an OpenAPI 3 document with a real
// title and version, the bearer scheme, a google.rpc.Status body for every
// error response, an operation for every RPC, and NDJSON for the change stream.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc := getOpenAPI(t, newStack(t, app.Options{}))

	assert.Regexp(t, `^3\.`, doc.OpenAPI)
	assert.Equal(t, "sharelog API", doc.Info.Title)
	assert.Regexp(t, regexp.MustCompile(`^1\.\d+\.\d+$`), doc.Info.Version, "major version = proto package v1")
	require.Len(t, doc.Servers, 1)
	assert.Equal(t, "/", doc.Servers[0].URL)

	t.Run("bearer scheme", func(t *testing.T) {
		var bearer []string
		for name, s := range doc.Components.SecuritySchemes {
			if s.Type == "http" && strings.EqualFold(s.Scheme, "bearer") {
				bearer = append(bearer, name)
			}
		}
		require.Len(t, bearer, 1, "one http bearer scheme: %v", doc.Components.SecuritySchemes)
		// Required when the server has --auth-tokens-file, so optional here:
		// one requirement names the scheme and an empty one allows no credentials.
		assert.ElementsMatch(t, []map[string][]string{{bearer[0]: {}}, {}}, doc.Security)
	})

	t.Run("every RPC is an operation", func(t *testing.T) {
		ids := map[string]bool{}
		for _, item := range doc.Paths {
			for _, op := range item {
				ids[op.OperationID] = true
			}
		}
		var want []string
		for _, fd := range []protoreflect.FileDescriptor{
			sharelogv1.File_sharelog_v1_log_proto,
			sharelogv1.File_sharelog_v1_share_group_proto,
			sharelogv1.File_sharelog_v1_change_stream_proto,
		} {
			for i := range fd.Services().Len() {
				svc := fd.Services().Get(i)
				for j := range svc.Methods().Len() {
					want = append(want, string(svc.Name())+"_"+string(svc.Methods().Get(j).Name()))
				}
			}
		}
		require.NotEmpty(t, want)
		for _, id := range want {
			assert.True(t, ids[id], "no operation %s", id)
		}
	})

	t.Run("error responses", func(t *testing.T) {
		for path, item := range doc.Paths {
			for method, op := range item {
				name := strings.ToUpper(method) + " " + path
				wantRef := statusRef
				if path == changesPath {
					wantRef = streamLineRef
				}
				for _, code := range []string{"400", "401", "403", "404", "500", "503", "default"} {
					r, ok := op.Responses[code]
					if !assert.True(t, ok, "%s: no %s response", name, code) {
						continue
					}
					assert.NotEmpty(t, r.Description, "%s %s", name, code)
					require.Contains(t, r.Content, "application/json", "%s %s", name, code)
					assert.Len(t, r.Content, 1, "%s %s", name, code)
					assert.Equal(t, wantRef, r.Content["application/json"].Schema.Ref, "%s %s", name, code)
				}
				ok200 := op.Responses["200"]
				assert.Len(t, ok200.Content, 1, "%s 200", name)
			}
		}
		assert.Contains(t, doc.operation(t, "/v1/topics", "POST").Responses, "409", "TOPIC_ALREADY_EXISTS")
		for _, route := range [][2]string{
			{"POST", "/v1/topics/{topic}/records"},
			{"POST", "/v1/purge"},
			{"POST", "/v1/share-groups/{groupId}:fetch"},
			{"PATCH", "/v1/share-groups/{groupId}/config"},
		} {
			assert.Contains(t, doc.operation(t, route[1], route[0]).Responses, "413", "%v has a body", route)
		}
		for _, route := range [][2]string{
			{"POST", "/v1/share-groups/{groupId}:heartbeat"},
			{"POST", "/v1/share-groups/{groupId}:fetch"},
			{"GET", changesPath},
		} {
			assert.Contains(t, doc.operation(t, route[1], route[0]).Responses, "429", "%v", route)
		}
		st := doc.Components.Schemas["rpcStatus"]
		assert.Subset(t, keys(st.Properties), []string{"code", "message", "details"})
	})

	t.Run("change stream is NDJSON", func(t *testing.T) {
		op := doc.operation(t, changesPath, "GET")
		ok := op.Responses["200"]
		require.Len(t, ok.Content, 1)
		require.Contains(t, ok.Content, "application/x-ndjson")
		assert.Equal(t, streamLineRef, ok.Content["application/x-ndjson"].Schema.Ref)
		// A line holds one event: the gateway writes a message's events on
		// lines of their own.
		line := doc.Components.Schemas["v1ChangeEventStreamLine"]
		assert.Equal(t, "#/components/schemas/v1ChangeEvent", line.Properties["result"].Ref)
		assert.Equal(t, statusRef, line.Properties["error"].Ref)
	})
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestOpenAPIMatchesErrors: real error answers have a status the document
// lists for their route and a body whose fields its schema names, and the
// document stays readable without a token when auth is on.
func TestOpenAPIMatchesErrors(t *testing.T) {
	t.Parallel()
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("s3cret\n"), 0o600))
	s := newStack(t, app.Options{}, func(c *app.Config) { c.AuthTokensFile = tokens })
	doc := getOpenAPI(t, s) // no Authorization header: the document is public

	check := func(t *testing.T, op oasOp, status int, body map[string]any, schemaRef string) {
		t.Helper()
		r, ok := op.Responses[strconv.Itoa(status)]
		require.True(t, ok, "%s: status %d is not in the document", op.OperationID, status)
		ct := "application/json"
		require.Contains(t, r.Content, ct)
		assert.Equal(t, schemaRef, r.Content[ct].Schema.Ref)
		schema := doc.Components.Schemas[strings.TrimPrefix(schemaRef, "#/components/schemas/")]
		require.NotEmpty(t, body)
		for k := range body {
			assert.Contains(t, schema.Properties, k, "%s: body field %q is not in %s", op.OperationID, k, schemaRef)
		}
	}

	t.Run("401 without a token", func(t *testing.T) {
		r := s.rest(t, http.MethodGet, "/v1/topics", "")
		check(t, doc.operation(t, "/v1/topics", "GET"), r.Status, r.Body, statusRef)
		require.Equal(t, http.StatusUnauthorized, r.Status, r.Raw)
	})

	call := func(t *testing.T, method, path, body string) restResponse {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, s.http.URL+path, rd)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := s.http.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		out := restResponse{Status: resp.StatusCode, Raw: string(raw)}
		line, _, _ := strings.Cut(string(raw), "\n")
		require.NoError(t, json.Unmarshal([]byte(line), &out.Body), "body: %s", raw)
		return out
	}
	t.Run("404 unknown topic", func(t *testing.T) {
		r := call(t, http.MethodGet, "/v1/topics/nope", "")
		require.Equal(t, http.StatusNotFound, r.Status, r.Raw)
		check(t, doc.operation(t, "/v1/topics/{name}", "GET"), r.Status, r.Body, statusRef)
	})
	t.Run("409 topic exists", func(t *testing.T) {
		require.Equal(t, http.StatusOK, call(t, http.MethodPost, "/v1/topics", `{"name":"dup","partitions":1}`).Status)
		r := call(t, http.MethodPost, "/v1/topics", `{"name":"dup","partitions":1}`)
		require.Equal(t, http.StatusConflict, r.Status, r.Raw)
		check(t, doc.operation(t, "/v1/topics", "POST"), r.Status, r.Body, statusRef)
	})
	t.Run("change stream error before the first event", func(t *testing.T) {
		r := call(t, http.MethodGet, "/v1/topics/nope/partitions/0/changes", "")
		require.Equal(t, http.StatusNotFound, r.Status, r.Raw)
		check(t, doc.operation(t, changesPath, "GET"), r.Status, r.Body, streamLineRef)
	})
}
