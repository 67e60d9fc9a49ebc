// Command openapiv3 turns the Swagger 2.0 document that protoc-gen-openapiv2
// writes into the OpenAPI 3 document the server serves. `make generate` runs
// it; it works offline like the protoc plugins (its only dependency,
// kin-openapi, is pinned in tools/go.mod).
//
//	go -C tools run ./openapiv3 IN.swagger.json OUT.openapi.json
//
// protoc-gen-openapiv2 does the real work (routes from http.yaml, schemas
// from the protos, options from proto/sharelog/v1/openapi.yaml) and
// kin-openapi's openapi2conv does the conversion. Two things Swagger 2.0
// cannot say are then said in OpenAPI 3 terms:
//
//   - A bearer token. Swagger 2.0 has no bearer scheme, only an apiKey in the
//     Authorization header; such a scheme becomes {type: http, scheme: bearer}.
//   - A streaming route. Swagger 2.0 has one media type list per operation, so
//     a route that produces application/x-ndjson gets it for its errors too.
//     grpc-gateway writes an error that happens before the first event as an
//     HTTP error status whose body is one JSON line {"error": Status}, i.e. the
//     stream's line shape with only "error" set; so the 2xx response keeps the
//     NDJSON media type and every other response becomes application/json with
//     the line's schema. A message that batches events (flattenedBatches) is
//     written one element per line, so its line's result is the element.
//
// The result is validated with kin-openapi and refused if the options file was
// not applied (a title or version left at protoc-gen-openapiv2's defaults).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
)

const mimeNDJSON = "application/x-ndjson"

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: openapiv3 IN.swagger.json OUT.openapi.json")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "openapiv3:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	raw, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	doc3, err := convert(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	body, err := marshal(doc3)
	if err != nil {
		return err
	}
	return os.WriteFile(out, body, 0o644)
}

// convert is the whole transformation, from Swagger 2.0 JSON to a validated
// OpenAPI 3 document.
func convert(raw []byte) (*openapi3.T, error) {
	var doc2 openapi2.T
	if err := json.Unmarshal(raw, &doc2); err != nil {
		return nil, fmt.Errorf("not a Swagger 2.0 document: %w", err)
	}
	if err := checkInfo(doc2.Info); err != nil {
		return nil, err
	}
	doc3, err := openapi2conv.ToV3(&doc2)
	if err != nil {
		return nil, fmt.Errorf("convert to OpenAPI 3: %w", err)
	}
	bearerSchemes(doc3)
	dropConversionExtensions(doc3)
	if err := streamingResponses(&doc2, doc3); err != nil {
		return nil, err
	}
	if err := doc3.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI 3 document is invalid: %w", err)
	}
	return doc3, nil
}

// checkInfo refuses protoc-gen-openapiv2's defaults, which mean that the
// openapi_configuration file was not applied to the file that leads the merge.
func checkInfo(info openapi3.Info) error {
	switch {
	case info.Title == "" || strings.HasSuffix(info.Title, ".proto"):
		return fmt.Errorf("info.title is %q: set it in the OpenAPI options file", info.Title)
	case info.Version == "" || info.Version == "version not set":
		return fmt.Errorf("info.version is %q: set it in the OpenAPI options file", info.Version)
	}
	return nil
}

// bearerSchemes turns each apiKey scheme in the Authorization header into
// an HTTP bearer scheme, which is what Swagger 2.0 could not express.
func bearerSchemes(doc3 *openapi3.T) {
	for _, ref := range doc3.Components.SecuritySchemes {
		s := ref.Value
		if s == nil || s.Type != "apiKey" || s.In != "header" || !strings.EqualFold(s.Name, "Authorization") {
			continue
		}
		s.Type, s.Scheme, s.In, s.Name = "http", "bearer", "", ""
	}
}

// dropConversionExtensions removes x-originalParamName, which openapi2conv
// leaves on each request body to remember the Swagger 2.0 body parameter's
// name ("body"): it is meant for converting back and tells a reader nothing.
func dropConversionExtensions(doc3 *openapi3.T) {
	for _, item := range doc3.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				delete(op.RequestBody.Value.Extensions, "x-originalParamName")
			}
		}
	}
}

// streamingResponses gives the operations that produce NDJSON their real
// media types: NDJSON for the 2xx stream, JSON (one line of the same shape)
// for an error answered before the stream starts.
func streamingResponses(doc2 *openapi2.T, doc3 *openapi3.T) error {
	for path, item2 := range doc2.Paths {
		for method, op2 := range item2.Operations() {
			if !producesOnly(op2.Produces, mimeNDJSON) {
				continue
			}
			item3 := doc3.Paths.Value(path)
			var op3 *openapi3.Operation
			if item3 != nil {
				op3 = item3.GetOperation(method)
			}
			if op3 == nil || op3.Responses == nil {
				return fmt.Errorf("%s %s: missing after conversion", method, path)
			}
			var line *openapi3.SchemaRef
			for code, resp := range op3.Responses.Map() {
				if is2xx(code) && resp.Value != nil && resp.Value.Content[mimeNDJSON] != nil {
					line = resp.Value.Content[mimeNDJSON].Schema
				}
			}
			if line == nil {
				return fmt.Errorf("%s %s produces %s but has no 2xx response with a schema", method, path, mimeNDJSON)
			}
			line, err := namedLineSchema(doc3, line)
			if err != nil {
				return fmt.Errorf("%s %s: %w", method, path, err)
			}
			for code, resp := range op3.Responses.Map() {
				switch {
				case resp.Value == nil:
				case is2xx(code):
					if mt := resp.Value.Content[mimeNDJSON]; mt != nil {
						mt.Schema = line
					}
				default:
					resp.Value.Content = openapi3.NewContentWithJSONSchemaRef(line)
				}
			}
		}
	}
	return nil
}

// namedLineSchema moves the inline schema of a stream line ({"result": M,
// "error": Status}, which protoc-gen-openapiv2 writes inline) into
// components.schemas as <M>StreamLine, so that every response of the route
// refers to it instead of repeating it.
func namedLineSchema(doc3 *openapi3.T, line *openapi3.SchemaRef) (*openapi3.SchemaRef, error) {
	if line.Ref != "" {
		return line, nil
	}
	result := line.Value.Properties["result"]
	if result == nil || result.Ref == "" {
		return nil, errors.New(`the stream line schema has no "result" reference`)
	}
	if field, ok := flattenedBatches[result.Ref[strings.LastIndex(result.Ref, "/")+1:]]; ok {
		batch := doc3.Components.Schemas[result.Ref[strings.LastIndex(result.Ref, "/")+1:]]
		var items *openapi3.SchemaRef
		if batch != nil && batch.Value != nil && batch.Value.Properties[field] != nil && batch.Value.Properties[field].Value != nil {
			items = batch.Value.Properties[field].Value.Items
		}
		if items == nil || items.Ref == "" {
			return nil, fmt.Errorf("%s has no array %q of references to flatten", result.Ref, field)
		}
		result = &openapi3.SchemaRef{Ref: items.Ref, Value: items.Value}
		line.Value.Properties["result"] = result
	}
	name := result.Ref[strings.LastIndex(result.Ref, "/")+1:] + "StreamLine"
	if _, taken := doc3.Components.Schemas[name]; taken {
		return nil, fmt.Errorf("schema name %s is already taken", name)
	}
	line.Value.Title = ""
	line.Value.Description = "One line of the NDJSON stream: `result` holds an event; `error`, set only on the last line, says why the stream failed."
	doc3.Components.Schemas[name] = line
	return &openapi3.SchemaRef{Ref: "#/components/schemas/" + name, Value: line.Value}, nil
}

// flattenedBatches are the stream messages that carry several events in a
// repeated field (schema name → field): the server's NDJSON marshaler
// writes each element on a line of its own, so a line's result is one
// element, not the message.
var flattenedBatches = map[string]string{"v1StreamChangesResponse": "events"}

func producesOnly(produces []string, mime string) bool {
	return len(produces) == 1 && produces[0] == mime
}

func is2xx(code string) bool { return len(code) == 3 && code[0] == '2' }

// marshal writes the document as indented JSON with a final newline, in a
// stable order (encoding/json sorts map keys), so that regeneration is
// byte-for-byte reproducible.
func marshal(doc3 *openapi3.T) ([]byte, error) {
	raw, err := json.Marshal(doc3)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}
