package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// purgeEntry is one element of the "partitions" array of a kafka-delete-records.sh offset JSON
// file: delete the records of topic-partition below offset (-1 = up to the high watermark).
type purgeEntry struct {
	Topic     string
	Partition int32
	Offset    int64
}

func (e purgeEntry) name() string { return fmt.Sprintf("%s-%d", e.Topic, e.Partition) }

// parsePurgeJSON parses Kafka's kafka-delete-records.sh offset JSON:
//
//	{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}
//
// "version" is optional and must be 1 when present; "partitions" must be a non-empty array whose
// entries each have a string "topic", an int32 "partition" and an int64 "offset" (other fields
// are ignored, as Kafka does); a topic-partition may appear only once. Values are checked for
// their type only: the server judges each partition (unknown partition, offset out of range...).
func parsePurgeJSON(data []byte) ([]purgeEntry, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("the file is empty")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, fmt.Errorf("expected a JSON object like %s, got %s", purgeJSONExample, typeErr.Value)
		}
		return nil, fmt.Errorf("invalid JSON: %s", describeJSONError(data, err))
	}

	if raw, ok := top["version"]; ok {
		v, err := jsonInt(raw, math.MinInt64, math.MaxInt64)
		if err != nil {
			return nil, fmt.Errorf(`"version": %w`, err)
		}
		if v != 1 {
			return nil, fmt.Errorf(`unsupported "version" %d: only 1 is supported`, v)
		}
	}

	raw, ok := top["partitions"]
	if !ok || jsonKind(raw) == "null" {
		return nil, fmt.Errorf(`missing "partitions" field; expected %s`, purgeJSONExample)
	}
	if kind := jsonKind(raw); kind != "array" {
		return nil, fmt.Errorf(`"partitions" must be an array, got %s`, kind)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf(`"partitions": %w`, err)
	}
	if len(items) == 0 {
		return nil, errors.New(`"partitions" is empty: nothing to purge`)
	}

	entries := make([]purgeEntry, 0, len(items))
	seen := make(map[purgeEntry]bool, len(items)) // keyed with Offset 0
	var duplicates []string
	for i, item := range items {
		e, err := parsePurgeEntry(item)
		if err != nil {
			return nil, fmt.Errorf("partitions[%d]: %w", i, err)
		}
		key := purgeEntry{Topic: e.Topic, Partition: e.Partition}
		if seen[key] {
			duplicates = append(duplicates, e.name())
		}
		seen[key] = true
		entries = append(entries, e)
	}
	if len(duplicates) > 0 {
		return nil, fmt.Errorf("the file contains duplicate topic partitions: %s", strings.Join(duplicates, ", "))
	}
	return entries, nil
}

const purgeJSONExample = `{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}`

func parsePurgeEntry(raw json.RawMessage) (purgeEntry, error) {
	if kind := jsonKind(raw); kind != "object" {
		return purgeEntry{}, fmt.Errorf(`must be an object like {"topic": "foo", "partition": 1, "offset": 1}, got %s`, kind)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return purgeEntry{}, err
	}
	var e purgeEntry

	topic, ok := fields["topic"]
	if !ok {
		return purgeEntry{}, errors.New(`missing "topic"`)
	}
	if kind := jsonKind(topic); kind != "string" {
		return purgeEntry{}, fmt.Errorf(`"topic" must be a string, got %s`, kind)
	}
	if err := json.Unmarshal(topic, &e.Topic); err != nil {
		return purgeEntry{}, fmt.Errorf(`"topic": %w`, err)
	}
	if e.Topic == "" {
		return purgeEntry{}, errors.New(`"topic" is empty`)
	}

	partition, ok := fields["partition"]
	if !ok {
		return purgeEntry{}, errors.New(`missing "partition"`)
	}
	p, err := jsonInt(partition, math.MinInt32, math.MaxInt32)
	if err != nil {
		return purgeEntry{}, fmt.Errorf(`"partition": %w`, err)
	}
	e.Partition = int32(p)

	offset, ok := fields["offset"]
	if !ok {
		return purgeEntry{}, errors.New(`missing "offset"`)
	}
	if e.Offset, err = jsonInt(offset, math.MinInt64, math.MaxInt64); err != nil {
		return purgeEntry{}, fmt.Errorf(`"offset": %w`, err)
	}
	return e, nil
}

// jsonInt decodes an integer JSON number within [lo, hi].
func jsonInt(raw json.RawMessage, lo, hi int64) (int64, error) {
	if kind := jsonKind(raw); kind != "number" {
		return 0, fmt.Errorf("must be an integer, got %s", kind)
	}
	text := string(bytes.TrimSpace(raw))
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		var numErr *strconv.NumError
		if errors.As(err, &numErr) && errors.Is(numErr.Err, strconv.ErrRange) {
			return 0, fmt.Errorf("%s is out of range", text)
		}
		return 0, fmt.Errorf("must be an integer, got %s", text)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%s is out of range [%d, %d]", text, lo, hi)
	}
	return v, nil
}

// jsonKind names the type of a valid JSON value from its first byte.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// describeJSONError adds the line and column of a syntax error.
func describeJSONError(data []byte, err error) string {
	var syntaxErr *json.SyntaxError
	if !errors.As(err, &syntaxErr) {
		return err.Error()
	}
	// Offset counts the bytes read, the offending one included.
	at := int(syntaxErr.Offset) - 1
	if at < 0 || at >= len(data) || strings.HasPrefix(err.Error(), "unexpected end") {
		return err.Error() // no offending byte to point at
	}
	line := 1 + bytes.Count(data[:at], []byte("\n"))
	col := at - bytes.LastIndexByte(data[:at], '\n')
	return fmt.Sprintf("%v at line %d, column %d", err, line, col)
}
