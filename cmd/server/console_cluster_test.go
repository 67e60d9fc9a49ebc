package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The Cluster page (docs/console.md): in a partitioned cluster of two
// instances it shows the mode, both instances with the partitions each
// owns, and each partition's owner and epoch; after a SIGTERM of one, the
// page follows the handover on its own: every partition owned by the
// other. Only public API routes are called.
func TestConsoleBrowserCluster(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	a := startPartitioned(t, js.URL(), prefix, "a")
	bb := startPartitioned(t, js.URL(), prefix, "b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := sharelogv1.NewLogServiceClient(a.conn).CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 4})
	require.NoError(t, err)
	waitSpread(t, a, 4, []string{"a", "b"}, 20*time.Second)

	b := newBrowser(t)
	base := "http://" + a.httpAddr
	shots := newShooter(t)
	ownedBy := func(id string, want int) string {
		return `[...document.querySelectorAll('main table')[1].querySelectorAll('tbody tr')].filter(r => r.cells[2].innerText === '` + id + `').length === ` + string(rune('0'+want))
	}
	b.run(t, "cluster page", chromedp.Navigate(base+"/ui/#/cluster"), waitText("#cluster-mode", "partitioned"),
		waitText("main table", "a"), waitText("main table", "b"), poll(ownedBy("a", 2)), poll(ownedBy("b", 2)))
	checkA11y(t, b, "cluster")
	shots.shoot(t, b, "cluster", waitText("#cluster-mode", "partitioned"))

	require.NoError(t, bb.cmd.Process.Signal(syscall.SIGTERM))
	b.run(t, "handover shown", poll(ownedBy("a", 4)), poll(ownedBy("b", 0)))
	checkOnlyPublic(t, b, base, 2)
}
