package testsupport

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readyzClient gives up on an instance that does not answer within a
// second (one cut from its peers may hang), so the wait polls again.
var readyzClient = &http.Client{Timeout: time.Second}

// Readyz is GET http://httpAddr/readyz: its status and trimmed body.
func Readyz(httpAddr string) (int, string, error) {
	resp, err := readyzClient.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// WaitReadyz polls the /readyz of the server at httpAddr until it answers
// 200 with a body containing want, and returns how long that took; it
// fails the test after within.
func WaitReadyz(t testing.TB, httpAddr, want string, within time.Duration) time.Duration {
	t.Helper()
	return WaitReadyzStatus(t, httpAddr, http.StatusOK, want, within)
}

// WaitReadyzStatus is WaitReadyz for another status (503 while not ready).
// A request that fails (the instance does not answer) is polled again.
func WaitReadyzStatus(t testing.TB, httpAddr string, code int, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got, body, err := Readyz(httpAddr)
		if err == nil && got == code && strings.Contains(body, want) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s /readyz: %d %q (err %v) after %v, want %d %q", httpAddr, got, body, err, within, code, want)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// MetricsText returns the /metrics page under baseURL (http://host:port)
// fetched with c, or "" if it cannot be read. It does not fail the test,
// so it may run off the test's goroutine (as require.Eventually's
// condition does).
func MetricsText(c *http.Client, baseURL string) string {
	resp, err := c.Get(baseURL + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(raw)
}

// LongPollsWaiting matches the exposition line of the
// sharelog_long_polls_waiting gauge at n.
func LongPollsWaiting(n int) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`(?m)^sharelog_long_polls_waiting(\{[^}]*\})? %d$`, n))
}

// AwaitLongPolls waits (up to 10 s) until n Fetch or ShareFetch calls
// hold a long-poll slot of the server whose /metrics is under baseURL: a
// fetch takes its slot after subscribing to appends, so from then on a
// produce wakes it.
func AwaitLongPolls(t testing.TB, c *http.Client, baseURL string, n int) {
	t.Helper()
	re := LongPollsWaiting(n)
	require.Eventually(t, func() bool { return re.MatchString(MetricsText(c, baseURL)) }, 10*time.Second, 5*time.Millisecond,
		"%d calls wait for records", n)
}
