package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// swagger is a small protoc-gen-openapiv2-like document: one JSON route, one
// NDJSON stream route, a bearer token as an apiKey, and a google.rpc.Status.
const swagger = `{
  "swagger": "2.0",
  "info": {"title": "t API", "version": "1.2.3"},
  "basePath": "/",
  "consumes": ["application/json"],
  "produces": ["application/json"],
  "securityDefinitions": {
    "bearer": {"type": "apiKey", "name": "Authorization", "in": "header"},
    "key": {"type": "apiKey", "name": "X-Key", "in": "header"}
  },
  "security": [{"bearer": []}, {}],
  "paths": {
    "/v1/things": {
      "post": {
        "operationId": "S_Create",
        "parameters": [{"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/Thing"}}],
        "responses": {
          "200": {"description": "ok", "schema": {"$ref": "#/definitions/Thing"}},
          "404": {"description": "nf", "schema": {"$ref": "#/definitions/rpcStatus"}},
          "default": {"description": "err", "schema": {"$ref": "#/definitions/rpcStatus"}}
        }
      }
    },
    "/v1/things:watch": {
      "get": {
        "operationId": "S_Watch",
        "produces": ["application/x-ndjson"],
        "responses": {
          "200": {"description": "stream", "schema": {"type": "object", "title": "Stream result of Thing",
            "properties": {"result": {"$ref": "#/definitions/Thing"}, "error": {"$ref": "#/definitions/rpcStatus"}}}},
          "404": {"description": "nf", "schema": {"$ref": "#/definitions/rpcStatus"}},
          "default": {"description": "err", "schema": {"$ref": "#/definitions/rpcStatus"}}
        }
      }
    }
  },
  "definitions": {
    "Thing": {"type": "object", "properties": {"name": {"type": "string"}}},
    "rpcStatus": {"type": "object", "properties": {"code": {"type": "integer"}, "message": {"type": "string"}}}
  }
}`

// contentRefs maps each response code to "media type -> $ref" of its content.
func contentRefs(t *testing.T, doc map[string]any, path, method string) map[string]map[string]string {
	t.Helper()
	op := doc["paths"].(map[string]any)[path].(map[string]any)[method].(map[string]any)
	out := map[string]map[string]string{}
	for code, r := range op["responses"].(map[string]any) {
		out[code] = map[string]string{}
		for mime, mt := range r.(map[string]any)["content"].(map[string]any) {
			ref, _ := mt.(map[string]any)["schema"].(map[string]any)["$ref"].(string)
			out[code][mime] = ref
		}
	}
	return out
}

func TestConvert(t *testing.T) {
	doc3, err := convert([]byte(swagger))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := marshal(doc3)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(raw), "}\n") {
		t.Error("the document does not end with a newline")
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if v := doc["openapi"]; v != "3.0.3" {
		t.Errorf("openapi = %v", v)
	}

	schemes := doc["components"].(map[string]any)["securitySchemes"].(map[string]any)
	if got := schemes["bearer"]; !jsonEqual(got, map[string]any{"type": "http", "scheme": "bearer"}) {
		t.Errorf("bearer scheme = %v, want http/bearer", got)
	}
	if got := schemes["key"]; !jsonEqual(got, map[string]any{"type": "apiKey", "name": "X-Key", "in": "header"}) {
		t.Errorf("an apiKey in another header must stay an apiKey, got %v", got)
	}

	const status, line = "#/components/schemas/rpcStatus", "#/components/schemas/ThingStreamLine"
	if got, want := contentRefs(t, doc, "/v1/things", "post"), map[string]map[string]string{
		"200":     {"application/json": "#/components/schemas/Thing"},
		"404":     {"application/json": status},
		"default": {"application/json": status},
	}; !jsonEqual(got, want) {
		t.Errorf("JSON route responses = %v, want %v", got, want)
	}
	if got, want := contentRefs(t, doc, "/v1/things:watch", "get"), map[string]map[string]string{
		"200":     {"application/x-ndjson": line},
		"404":     {"application/json": line},
		"default": {"application/json": line},
	}; !jsonEqual(got, want) {
		t.Errorf("stream route responses = %v, want %v", got, want)
	}
	lineSchema := doc["components"].(map[string]any)["schemas"].(map[string]any)["ThingStreamLine"].(map[string]any)
	if _, ok := lineSchema["title"]; ok {
		t.Errorf("the line schema keeps the generator's title: %v", lineSchema)
	}
	if props := lineSchema["properties"].(map[string]any); len(props) != 2 || props["result"] == nil || props["error"] == nil {
		t.Errorf("line schema properties = %v", props)
	}

	body := doc["paths"].(map[string]any)["/v1/things"].(map[string]any)["post"].(map[string]any)["requestBody"].(map[string]any)
	if _, ok := body["x-originalParamName"]; ok {
		t.Errorf("x-originalParamName left on the request body: %v", body)
	}
}

func TestConvertRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ from, to, want string }{
		"proto file title":  {`"title": "t API"`, `"title": "sharelog/v1/common.proto"`, "info.title"},
		"default version":   {`"version": "1.2.3"`, `"version": "version not set"`, "info.version"},
		"stream w/o schema": {`"200": {"description": "stream", "schema"`, `"200": {"description": "stream", "x-schema"`, "no 2xx response"},
		"not JSON":          {`"swagger": "2.0",`, `"swagger": "2.0"`, "not a Swagger 2.0 document"},
	} {
		t.Run(name, func(t *testing.T) {
			in := strings.Replace(swagger, tc.from, tc.to, 1)
			if in == swagger {
				t.Fatalf("%q not found in the test document", tc.from)
			}
			_, err := convert([]byte(in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
