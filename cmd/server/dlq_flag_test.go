package main

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --dlq-auto-create-topics (default false) and --dlq-topic-prefix (default
// "dlq.") are set by flag or environment, listed by --help, and a bad
// prefix stops the server.
func TestDLQFlags(t *testing.T) {
	none := func(string) string { return "" }
	cfg, _, err := parseFlags(nil, none, io.Discard)
	require.NoError(t, err)
	assert.False(t, cfg.DLQAutoCreateTopics)
	assert.Equal(t, "dlq.", cfg.DLQTopicPrefix)

	cfg, _, err = parseFlags([]string{"--dlq-auto-create-topics", "--dlq-topic-prefix", "dead."}, none, io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.DLQAutoCreateTopics)
	assert.Equal(t, "dead.", cfg.DLQTopicPrefix)

	env := map[string]string{"SHARELOG_DLQ_AUTO_CREATE_TOPICS": "true", "SHARELOG_DLQ_TOPIC_PREFIX": "dl-"}
	cfg, _, err = parseFlags(nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.DLQAutoCreateTopics)
	assert.Equal(t, "dl-", cfg.DLQTopicPrefix)

	for _, bad := range []string{"", "__x", "a b"} {
		_, _, err = parseFlags([]string{"--dlq-topic-prefix", bad}, none, io.Discard)
		require.Error(t, err, "%q", bad)
		assert.Contains(t, err.Error(), "--dlq-topic-prefix")
	}

	var help bytes.Buffer
	_, _, _ = parseFlags([]string{"--help"}, none, &help)
	assert.Contains(t, help.String(), "-dlq-auto-create-topics")
	assert.Contains(t, help.String(), "-dlq-topic-prefix")
}
