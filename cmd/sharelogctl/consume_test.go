package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// produceValues produces "v0".."v<n-1>" (keyless) to topic.
func produceValues(t *testing.T, s *testServer, topic string, n int, partition ...string) {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "v%d\n", i)
	}
	requireOK(t, s.ctl(b.String(), append([]string{"produce", topic}, partition...)...))
}

var summaryPattern = `consumed %s from group %s in [0-9.]+m?s \([0-9.]+ records/s\), acknowledged as %s\n$`

func TestE2EConsume(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	requireOK(t, s.ctl("", "topics", "create", "orders", "--partitions", "2"))
	produceValues(t, s, "orders", 10)

	// --print: the records on stdout, the summary on stderr.
	res := s.ctl("", "consume", "--group", "g", "orders", "--auto-offset-reset", "earliest", "--count", "10", "--print")
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
	require.Len(t, lines, 10)
	var values []string
	for _, l := range lines {
		f := strings.Split(l, "\t")
		require.Len(t, f, 5, "topic, partition, offset, key, value: %q", l)
		assert.Equal(t, "orders", f[0])
		assert.Contains(t, []string{"0", "1"}, f[1])
		assert.Empty(t, f[3], "keyless")
		values = append(values, f[4])
	}
	sort.Strings(values)
	assert.Equal(t, []string{"v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9"}, values)
	assert.Regexp(t, "^"+fmt.Sprintf(summaryPattern, "10 records", "g", "ACCEPT"), res.stderr)

	// All accepted: the group has nothing more. Not a terminal: the summary only.
	res = s.ctl("", "consume", "--group", "g", "orders", "--idle-timeout", "300ms")
	requireOK(t, res)
	assert.Regexp(t, "^"+fmt.Sprintf(summaryPattern, "0 records", "g", "ACCEPT"), res.stdout)

	// -o json: a JSON summary.
	produceValues(t, s, "orders", 3)
	res = s.ctl("", "consume", "--group", "g", "orders", "--count", "3", "-o", "json")
	requireOK(t, res)
	var summary map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &summary), res.stdout)
	assert.Equal(t, "g", summary["group"])
	assert.EqualValues(t, 3, summary["records"])
	assert.Equal(t, "ACCEPT", summary["acknowledge"])
	assert.EqualValues(t, 0, summary["acknowledgementsFailed"])
}

func TestE2EConsumeReleaseAndReject(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	requireOK(t, s.ctl("", "topics", "create", "jobs"))
	produceValues(t, s, "jobs", 6)

	type rec struct {
		Offset        string `json:"offset"`
		Value         []byte `json:"value"`
		DeliveryCount int32  `json:"deliveryCount"`
	}
	consumeJSON := func(args ...string) []rec {
		t.Helper()
		res := s.ctl("", append([]string{"consume", "--group", "g", "jobs", "--print", "-o", "json"}, args...)...)
		require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
		var out []rec
		for _, l := range strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n") {
			if l == "" {
				continue
			}
			var r rec
			require.NoError(t, json.Unmarshal([]byte(l), &r), l)
			out = append(out, r)
		}
		return out
	}

	// Released records come back at once, their delivery count grown.
	got := consumeJSON("--auto-offset-reset", "earliest", "--count", "2", "--ack", "release")
	require.Len(t, got, 2)
	assert.Equal(t, rec{Offset: "0", Value: []byte("v0"), DeliveryCount: 1}, got[0])
	got = consumeJSON("--count", "2", "--ack", "reject")
	require.Len(t, got, 2)
	assert.Equal(t, rec{Offset: "0", Value: []byte("v0"), DeliveryCount: 2}, got[0])
	assert.Equal(t, rec{Offset: "1", Value: []byte("v1"), DeliveryCount: 2}, got[1])

	// Rejected records never come back: the rest are 2..5.
	got = consumeJSON("--idle-timeout", "300ms")
	var offs []string
	for _, r := range got {
		offs = append(offs, r.Offset)
	}
	assert.Equal(t, []string{"2", "3", "4", "5"}, offs)
}

func TestE2EConsumeInterrupted(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	requireOK(t, s.ctl("", "topics", "create", "quiet"))
	ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond) // Ctrl-C
	defer cancel()
	res := runCLIContext(ctx, "", "--addr", s.addr, "consume", "--group", "g", "quiet")
	requireOK(t, res)
	assert.Regexp(t, "^"+fmt.Sprintf(summaryPattern, "0 records", "g", "ACCEPT"), res.stdout)
}

func TestE2EConsumeErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	res := s.ctl("", "consume", "orders")
	require.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, `required flag(s) "group" not set`)

	for _, args := range [][]string{
		{"--ack", "renew"},
		{"--ack", "bogus"},
		{"--max-records", "0"},
		{"--count", "-1"},
		{"--idle-timeout", "-1s"},
	} {
		res := s.ctl("", append([]string{"consume", "--group", "g", "orders"}, args...)...)
		require.Equal(t, 1, res.code, "%v", args)
		assert.Regexp(t, `^error: invalid --`, res.stderr, "%v", args)
	}
	requireOK(t, s.ctl("", "topics", "create", "orders"))
	requireFailure(t, s.ctl("", "consume", "--group", "g", "orders", "--auto-offset-reset", "sometimes"), "INVALID_REQUEST")

	// Failures a share consumer would retry, or wait through, until interrupted: the command
	// fails at once instead (before, it waited, then exited 0 on Ctrl-C or --idle-timeout).
	t.Run("unknown topic", func(t *testing.T) {
		for _, args := range [][]string{{"nope"}, {"orders", "nope"}, {"nope", "--idle-timeout", "1s"}} {
			res := ctlWithin(t, 5*time.Second, s.addr, append([]string{"consume", "--group", "g"}, args...)...)
			requireFailure(t, res, "UNKNOWN_TOPIC_OR_PARTITION")
			assert.Contains(t, res.stderr, `"nope"`)
			assert.Empty(t, res.stdout, "no summary")
		}
	})
	t.Run("server down", func(t *testing.T) {
		addr := downAddr(t)
		for _, args := range [][]string{{}, {"--idle-timeout", "1s"}, {"--auto-offset-reset", "earliest"}} {
			res := ctlWithin(t, 5*time.Second, addr, append([]string{"consume", "--group", "g", "orders"}, args...)...)
			requireFailure(t, res, "UNAVAILABLE")
			assert.Contains(t, res.stderr, "cannot reach the server at "+addr)
			assert.Empty(t, res.stdout, "no summary")
		}
	})
	t.Run("server silent", func(t *testing.T) {
		res := ctlWithin(t, 5*time.Second, silentAddr(t), "--timeout", "300ms", "consume", "--group", "g", "orders")
		requireFailure(t, res, "UNAVAILABLE")
		assert.Contains(t, res.stderr, "no connection within --timeout 300ms")
	})
}

// Not parallel: it changes the progress display's package variables.
func TestE2EConsumeProgressOnATerminal(t *testing.T) {
	s := startServer(t)
	requireOK(t, s.ctl("", "topics", "create", "t"))
	// Produced before the display is switched on: produce shows progress
	// on a terminal too, and on a loaded machine it can take 20 ms.
	produceValues(t, s, "t", 50)

	oldInterval, oldIsTerminal := progressInterval, isTerminal
	progressInterval = 20 * time.Millisecond
	isTerminal = func(io.Writer) bool { return true }
	t.Cleanup(func() { progressInterval, isTerminal = oldInterval, oldIsTerminal })
	res := s.ctl("", "consume", "--group", "g", "t", "--auto-offset-reset", "earliest", "--max-records", "5", "--idle-timeout", "300ms")
	requireOK(t, res)
	assert.Contains(t, res.stdout, "\r\x1b[Kconsumed ")
	assert.Regexp(t, `consumed \d+ records, [0-9.]+ records/s`, res.stdout)
	// The progress line is cleared before the summary.
	assert.Regexp(t, "\r\x1b\\[K"+fmt.Sprintf(summaryPattern, "50 records", "g", "ACCEPT"), res.stdout)
}

// TestE2EConsumeFromBeginning: a new group skips the records already there unless
// --from-beginning (issue 34, friction 1), consume says so, and the summary's duration is
// the run's (it said "in 0s" after an --idle-timeout of 3 s).
func TestE2EConsumeFromBeginning(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	requireOK(t, s.ctl("", "topics", "create", "backlog", "--partitions", "2"))
	produceValues(t, s, "backlog", 5)

	res := s.ctl("", "consume", "--group", "late", "backlog", "--idle-timeout", "300ms")
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	assert.Equal(t, "hint: share group late is new and starts at the latest offset: the 5 records already in backlog are not delivered to it; use --from-beginning to read them\n", res.stderr)
	assert.Regexp(t, "^"+fmt.Sprintf(summaryPattern, "0 records", "late", "ACCEPT"), res.stdout)
	m := regexp.MustCompile(` in ([0-9.]+m?s) `).FindStringSubmatch(res.stdout)
	require.NotNil(t, m, res.stdout)
	d, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, d, 300*time.Millisecond, "the summary counts the idle time of a run without records")

	res = s.ctl("", "consume", "--group", "late", "backlog", "--idle-timeout", "100ms")
	requireOK(t, res)
	assert.Empty(t, res.stderr, "the group has share state now: no hint")

	res = s.ctl("", "consume", "--group", "early", "backlog", "--from-beginning", "--count", "5", "--print")
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	assert.Len(t, strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n"), 5, res.stdout)
	assert.Regexp(t, "^"+fmt.Sprintf(summaryPattern, "5 records", "early", "ACCEPT"), res.stderr, "no hint")
	res = s.ctl("", "share-groups", "config", "get", "early")
	requireOK(t, res)
	assert.Regexp(t, `auto_offset_reset\s+earliest`, res.stdout)

	// A group with state resumes where it is: --from-beginning changes nothing and says so.
	produceValues(t, s, "backlog", 2)
	res = s.ctl("", "consume", "--group", "early", "backlog", "--from-beginning", "--idle-timeout", "300ms", "--print")
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	assert.Len(t, strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n"), 2, "only the 2 new records: %s", res.stdout)
	assert.Contains(t, res.stderr, "note: share group early already has share state: it resumes where it is and --from-beginning changes nothing")

	res = s.ctl("", "consume", "--group", "x", "backlog", "--from-beginning", "--auto-offset-reset", "latest")
	require.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "none of the others can be")
}
