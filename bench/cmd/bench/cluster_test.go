package main

// Tests of the cluster rows' pure parts (X1–X3): no server, no network.

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestNATSClusterConf(t *testing.T) {
	conf := natsClusterConf("n2", "bench-1", 4223, 6223, "/data/n2", []int{6222, 6223, 6224}, true)
	for _, want := range []string{
		"server_name: n2\n",
		`listen: "127.0.0.1:4223"`,
		`store_dir: "/data/n2"`,
		"sync_interval: always",
		`name: "bench-1"`,
		`listen: "127.0.0.1:6223"`,
		"nats-route://127.0.0.1:6222\n", "nats-route://127.0.0.1:6223\n", "nats-route://127.0.0.1:6224\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q:\n%s", want, conf)
		}
	}
	if strings.Count(conf, "{") != strings.Count(conf, "}") || strings.Count(conf, "[") != strings.Count(conf, "]") {
		t.Errorf("unbalanced config:\n%s", conf)
	}
	if c := natsClusterConf("n1", "b", 1, 2, "/d", []int{2}, false); strings.Contains(c, "sync_interval") {
		t.Errorf("default sync interval must not be configured:\n%s", c)
	}
}

func TestBatchOffsets(t *testing.T) {
	first, err := batchOffsets(300, 100, 100)
	if err != nil || first != 200 {
		t.Fatalf("batch ending at sequence 300: first offset %d, %v; want 200", first, err)
	}
	if first, err := batchOffsets(1, 1, 1); err != nil || first != 0 {
		t.Fatalf("first message: %d, %v", first, err)
	}
	if _, err := batchOffsets(300, 99, 100); err == nil {
		t.Error("a batch size other than the messages sent must be an error")
	}
	if _, err := batchOffsets(50, 100, 100); err == nil {
		t.Error("a last sequence below the batch size must be an error")
	}
}

func TestX3LedgerCheck(t *testing.T) {
	// A run in which everything holds: 3 records acknowledged, all
	// accepted, one redelivered (the dead instance's lock) before its
	// ACCEPT, and a duplicate of unknown outcome in the log.
	good := func() (*x3Ledger, map[int64]string) {
		l := newX3Ledger()
		l.producedAt([]string{"a", "b"}, 0)
		l.producedAt([]string{"c"}, 3) // offset 2 holds a retried copy of an unacknowledged produce
		for off := range int64(4) {
			l.deliver(off, 1)
		}
		l.deliver(1, 2)
		l.acceptedAt([]int64{0, 1, 2, 3})
		return l, map[int64]string{0: "a", 1: "b", 2: "c", 3: "c"}
	}
	l, log := good()
	if err := l.check(log, 4, 4); err != nil {
		t.Fatalf("a good run failed: %v", err)
	}
	if l.deliveries != 5 || l.again != 1 || l.countAbove != 1 {
		t.Errorf("deliveries %d, again %d, count > 1 %d; want 5, 1, 1", l.deliveries, l.again, l.countAbove)
	}

	cases := []struct {
		name  string
		spoil func(l *x3Ledger, log map[int64]string) (hw, start int64)
		want  string
	}{
		{"acknowledged record missing", func(l *x3Ledger, log map[int64]string) (int64, int64) {
			delete(log, 1)
			return 4, 4
		}, "lost or moved"},
		{"acknowledged record at another offset", func(l *x3Ledger, log map[int64]string) (int64, int64) {
			log[0], log[1] = "b", "a"
			return 4, 4
		}, "lost or moved"},
		{"acknowledged record beyond the high watermark", func(l *x3Ledger, log map[int64]string) (int64, int64) {
			return 3, 3
		}, "beyond the high watermark"},
		{"delivered after its ACCEPT was acknowledged", func(l *x3Ledger, log map[int64]string) (int64, int64) {
			l.deliver(2, 2)
			return 4, 4
		}, "after its ACCEPT was acknowledged"},
		{"group not drained", func(l *x3Ledger, log map[int64]string) (int64, int64) {
			return 4, 3
		}, "not every record accepted"},
		{"value acknowledged twice", func(l *x3Ledger, log map[int64]string) (int64, int64) {
			l.producedAt([]string{"a"}, 3)
			return 4, 4
		}, "acknowledged at offsets"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, log := good()
			hw, start := c.spoil(l, log)
			err := l.check(log, hw, start)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	if err := newX3Ledger().check(map[int64]string{}, 0, 0); err == nil {
		t.Error("a run without any acknowledged produce must fail")
	}
}

func withReason(c codes.Code, reason string) error {
	st, err := status.New(c, reason).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "sharelog"})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func TestX3Retryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "NOT_OWNER"), true},
		{status.Error(codes.DeadlineExceeded, "slow"), true},
		{status.Error(codes.InvalidArgument, "bad"), false},
		{status.Error(codes.NotFound, "unknown topic"), false},
		{withReason(codes.NotFound, "SHARE_SESSION_NOT_FOUND"), true},
		{withReason(codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION"), false},
		{errors.New("plain"), false},
	} {
		if got := x3Retryable(c.err); got != c.want {
			t.Errorf("x3Retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestClusterRowsSelectable(t *testing.T) {
	e := &env{sz: quickSizes}
	seen := map[string]bool{}
	for _, g := range groups(e) {
		for _, id := range g.ids {
			if strings.HasPrefix(id, "X") {
				seen[id] = true
				if !anyWanted(g.ids, map[string]bool{id: true}) || g.ours == nil || len(g.rows) == 0 {
					t.Errorf("group %s cannot run alone", g.name)
				}
				for _, r := range g.rows {
					if r.bar.Text == "" {
						t.Errorf("%s row %s has no bar", id, r.key)
					}
				}
			}
		}
	}
	for _, id := range []string{"X1", "X2", "X3"} {
		if !seen[id] {
			t.Errorf("no group runs %s", id)
		}
	}
	for _, sz := range []sizes{quickSizes, fullSizes} {
		if sz.xRecords <= 0 || sz.xCap <= 0 || sz.xLeaseTTL <= 0 || sz.xBefore <= 0 || sz.xAfter <= 0 {
			t.Errorf("cluster sizes not set: %+v", sz)
		}
	}
}

func TestLabelled(t *testing.T) {
	if got := labelled("ours", "; per-consumer records min 1 / max 2"); got != "; ours: per-consumer records min 1 / max 2" {
		t.Errorf("labelled: %q", got)
	}
	if got := labelled("peer", ""); got != "" {
		t.Errorf("labelled of nothing: %q", got)
	}
}

func TestProfileLabel(t *testing.T) {
	if got := profileLabel([]string{"--fsync", "never"}); got != "fsync_never" {
		t.Errorf("profileLabel: %q", got)
	}
	got := profileLabel([]string{"--store", "jetstream", "--nats-url", "nats://127.0.0.1:1,nats://127.0.0.1:2,nats://127.0.0.1:3",
		"--nats-replicas", "3", "--instance-id", "a", "--lease-ttl", "2s"})
	if strings.ContainsAny(got, "/:,") || len(got) > 80 || !strings.HasSuffix(got, "instance-id_a_lease-ttl_2s") {
		t.Errorf("profileLabel of cluster flags: %q", got)
	}
}
