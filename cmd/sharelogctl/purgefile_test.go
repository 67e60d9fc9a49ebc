package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func TestParsePurgeJSON(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		want    []purgeEntry
		wantErr string // substring of the error; empty = success
	}{
		{
			name:  "kafka help example",
			input: `{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}`,
			want:  []purgeEntry{{Topic: "foo", Partition: 1, Offset: 1}},
		},
		{
			name:  "version omitted",
			input: `{"partitions":[{"topic":"foo","partition":0,"offset":5}]}`,
			want:  []purgeEntry{{Topic: "foo", Partition: 0, Offset: 5}},
		},
		{
			name: "several topics keep input order, extra fields ignored",
			input: `{"version":1,"partitions":[
				{"topic":"b","partition":2,"offset":-1,"comment":"up to the high watermark"},
				{"topic":"a","partition":0,"offset":9007199254740993},
				{"topic":"b","partition":0,"offset":0}
			]}`,
			want: []purgeEntry{
				{Topic: "b", Partition: 2, Offset: -1},
				{Topic: "a", Partition: 0, Offset: 9007199254740993},
				{Topic: "b", Partition: 0, Offset: 0},
			},
		},
		{
			name:  "same partition number in two topics is not a duplicate",
			input: `{"partitions":[{"topic":"a","partition":0,"offset":1},{"topic":"b","partition":0,"offset":1}]}`,
			want:  []purgeEntry{{Topic: "a", Offset: 1}, {Topic: "b", Offset: 1}},
		},
		{
			name:  "negative offsets and partitions are left to the server",
			input: `{"partitions":[{"topic":"a","partition":-1,"offset":-7}]}`,
			want:  []purgeEntry{{Topic: "a", Partition: -1, Offset: -7}},
		},
		{name: "empty file", input: "", wantErr: "the file is empty"},
		{name: "blank file", input: " \n\t", wantErr: "the file is empty"},
		{name: "invalid JSON", input: `{"partitions": [}`, wantErr: "invalid JSON: invalid character '}' looking for beginning of value at line 1, column 17"},
		{name: "syntax error position on a later line", input: "{\n  \"partitions\": [\n    {\"topic\" \"a\"}\n  ]\n}", wantErr: "at line 3, column 14"},
		{name: "truncated JSON", input: `{"partitions": [{"topic":"a"`, wantErr: "invalid JSON: unexpected end of JSON input"},
		{name: "trailing garbage", input: `{"partitions":[{"topic":"a","partition":0,"offset":1}]} x`, wantErr: "invalid JSON"},
		{name: "top level array", input: `[{"topic":"a","partition":0,"offset":1}]`, wantErr: "expected a JSON object like"},
		{name: "top level string", input: `"partitions"`, wantErr: "expected a JSON object like"},
		{name: "missing partitions", input: `{"version":1}`, wantErr: `missing "partitions" field`},
		{name: "null partitions", input: `{"partitions":null}`, wantErr: `missing "partitions" field`},
		{name: "misspelled partitions", input: `{"Partitions":[{"topic":"a","partition":0,"offset":1}]}`, wantErr: `missing "partitions" field`},
		{name: "top level null", input: `null`, wantErr: `missing "partitions" field`},
		{name: "empty partitions", input: `{"partitions":[]}`, wantErr: `"partitions" is empty`},
		{name: "partitions not an array", input: `{"partitions":{"topic":"a"}}`, wantErr: `"partitions" must be an array, got object`},
		{name: "version 2", input: `{"partitions":[{"topic":"a","partition":0,"offset":1}],"version":2}`, wantErr: `unsupported "version" 2`},
		{name: "version 0", input: `{"partitions":[{"topic":"a","partition":0,"offset":1}],"version":0}`, wantErr: `unsupported "version" 0`},
		{name: "version as string", input: `{"partitions":[{"topic":"a","partition":0,"offset":1}],"version":"1"}`, wantErr: `"version": must be an integer, got string`},
		{name: "version null", input: `{"partitions":[{"topic":"a","partition":0,"offset":1}],"version":null}`, wantErr: `"version": must be an integer, got null`},
		{name: "entry not an object", input: `{"partitions":["a-0"]}`, wantErr: "partitions[0]: must be an object"},
		{name: "missing topic", input: `{"partitions":[{"partition":0,"offset":1}]}`, wantErr: `partitions[0]: missing "topic"`},
		{name: "missing partition", input: `{"partitions":[{"topic":"a","offset":1}]}`, wantErr: `partitions[0]: missing "partition"`},
		{name: "missing offset", input: `{"partitions":[{"topic":"a","partition":0},{"topic":"a","partition":1}]}`, wantErr: `partitions[0]: missing "offset"`},
		{name: "error names the failing entry", input: `{"partitions":[{"topic":"a","partition":0,"offset":1},{"topic":"a","partition":1}]}`, wantErr: `partitions[1]: missing "offset"`},
		{name: "topic not a string", input: `{"partitions":[{"topic":7,"partition":0,"offset":1}]}`, wantErr: `"topic" must be a string, got number`},
		{name: "topic null", input: `{"partitions":[{"topic":null,"partition":0,"offset":1}]}`, wantErr: `"topic" must be a string, got null`},
		{name: "empty topic", input: `{"partitions":[{"topic":"","partition":0,"offset":1}]}`, wantErr: `"topic" is empty`},
		{name: "partition as string", input: `{"partitions":[{"topic":"a","partition":"0","offset":1}]}`, wantErr: `"partition": must be an integer, got string`},
		{name: "partition fraction", input: `{"partitions":[{"topic":"a","partition":1.5,"offset":1}]}`, wantErr: `"partition": must be an integer, got 1.5`},
		{name: "partition exponent", input: `{"partitions":[{"topic":"a","partition":1e2,"offset":1}]}`, wantErr: `"partition": must be an integer, got 1e2`},
		{name: "partition beyond int32", input: `{"partitions":[{"topic":"a","partition":2147483648,"offset":1}]}`, wantErr: `"partition": 2147483648 is out of range`},
		{name: "offset as boolean", input: `{"partitions":[{"topic":"a","partition":0,"offset":true}]}`, wantErr: `"offset": must be an integer, got boolean`},
		{name: "offset beyond int64", input: `{"partitions":[{"topic":"a","partition":0,"offset":9223372036854775808}]}`, wantErr: `"offset": 9223372036854775808 is out of range`},
		{
			name: "duplicate topic partition",
			input: `{"partitions":[{"topic":"a","partition":0,"offset":1},{"topic":"b","partition":0,"offset":1},
				{"topic":"a","partition":0,"offset":2}]}`,
			wantErr: "the file contains duplicate topic partitions: a-0",
		},
		{
			name: "every duplicate is listed",
			input: `{"partitions":[{"topic":"a","partition":0,"offset":1},{"topic":"a","partition":1,"offset":1},
				{"topic":"a","partition":0,"offset":2},{"topic":"a","partition":1,"offset":2}]}`,
			wantErr: "duplicate topic partitions: a-0, a-1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePurgeJSON([]byte(tt.input))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestBuildPurgeRequest(t *testing.T) {
	entries := []purgeEntry{
		{Topic: "b", Partition: 2, Offset: -1},
		{Topic: "a", Partition: 0, Offset: 3},
		{Topic: "b", Partition: 0, Offset: 4},
	}
	want := &sharelogv1.PurgeRequest{
		TimeoutMs: 1500,
		Topics: []*sharelogv1.PurgeTopic{
			{Topic: "b", Partitions: []*sharelogv1.PurgePartition{{Partition: 2, Offset: -1}, {Partition: 0, Offset: 4}}},
			{Topic: "a", Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 3}}},
		},
	}
	got := buildPurgeRequest(entries, 1500*time.Millisecond)
	assert.True(t, proto.Equal(want, got), "got %v", got)

	assert.EqualValues(t, 2147483647, buildPurgeRequest(entries, 1000*time.Hour).GetTimeoutMs(), "timeout_ms saturates")
}

// TestPurgeInvalidFile checks that invalid input fails before any call: --addr points nowhere
// reachable, so contacting the server would fail with UNAVAILABLE instead.
func TestPurgeInvalidFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantStderr string
	}{
		{
			name:       "missing file",
			args:       []string{"--offset-json-file", filepath.Join(dir, "nope.json")},
			wantStderr: "error: reading offset JSON file: open " + filepath.Join(dir, "nope.json") + ": no such file or directory\n",
		},
		{
			name:       "invalid JSON",
			args:       []string{"--offset-json-file", write("bad.json", `{"partitions":`)},
			wantStderr: "error: offset JSON file " + filepath.Join(dir, "bad.json") + ": invalid JSON: unexpected end of JSON input\n",
		},
		{
			name:       "missing partitions",
			args:       []string{"--offset-json-file", write("nopart.json", `{"version":1}`)},
			wantStderr: `missing "partitions" field`,
		},
		{
			name:       "duplicate",
			args:       []string{"--offset-json-file", write("dup.json", `{"partitions":[{"topic":"t","partition":0,"offset":1},{"topic":"t","partition":0,"offset":1}]}`)},
			wantStderr: "duplicate topic partitions: t-0\n",
		},
		{
			name:       "bad version from stdin",
			args:       []string{"--offset-json-file", "-"},
			stdin:      `{"partitions":[{"topic":"t","partition":0,"offset":1}],"version":3}`,
			wantStderr: "error: offset JSON file -: unsupported \"version\" 3: only 1 is supported\n",
		},
		{
			name:       "flag missing",
			args:       nil,
			wantStderr: "error: required flag(s) \"offset-json-file\" not set\nRun 'sharelogctl purge --help' for usage.\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Port 1 on loopback: nothing listens there, a call would fail with UNAVAILABLE.
			args := append([]string{"--addr", "127.0.0.1:1", "purge"}, tt.args...)
			res := runCLI(t, tt.stdin, args...)
			assert.Equal(t, 1, res.code)
			assert.Empty(t, res.stdout)
			assert.Contains(t, res.stderr, tt.wantStderr)
			assert.NotContains(t, res.stderr, "UNAVAILABLE")
		})
	}
}
