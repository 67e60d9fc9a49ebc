package main

// Tests of the cluster rows' pure parts (X1–X4): no server, no network.

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/bench/internal/report"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
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
				judged := 0
				for _, r := range g.rows {
					if r.bar.Op != report.NoBar {
						judged++
						if r.bar.Text == "" {
							t.Errorf("%s row %s has a bar without its text", id, r.key)
						}
					}
				}
				if judged == 0 {
					t.Errorf("%s has no judged row", id)
				}
			}
		}
	}
	for _, id := range []string{"X1", "X2", "X3", "X4"} {
		if !seen[id] {
			t.Errorf("no group runs %s", id)
		}
	}
	for _, sz := range []sizes{quickSizes, fullSizes} {
		if sz.xRecords <= 0 || sz.xCap <= 0 || sz.xLeaseTTL <= 0 || sz.xBefore <= 0 || sz.xAfter <= 0 ||
			sz.x4Records <= 0 || sz.x4Records%x4Partitions != 0 {
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

func owned(topic string, owners ...string) []*sharelogv1.PartitionOwner {
	out := make([]*sharelogv1.PartitionOwner, len(owners))
	for i, id := range owners {
		out[i] = &sharelogv1.PartitionOwner{Topic: topic, Partition: int32(i), OwnerId: id}
	}
	return out
}

func TestPartitionSpread(t *testing.T) {
	live := []string{"a", "b", "c"}
	// Another topic's partitions are not counted.
	parts := append(owned("x4", "a", "b", "c", "a", "b", "c"), owned("other", "a", "a", "a", "a")...)
	got, err := partitionSpread(parts, "x4", 6, live)
	if err != nil {
		t.Fatalf("an even spread: %v", err)
	}
	if len(got) != 6 || got[0] != "a" || got[4] != "b" || got[5] != "c" {
		t.Fatalf("owners %v", got)
	}
	// 7 over 3: 2 or 3 each is balanced within one.
	if _, err := partitionSpread(owned("t", "a", "a", "a", "b", "b", "c", "c"), "t", 7, live); err != nil {
		t.Fatalf("7 over 3 as 3/2/2: %v", err)
	}
	for _, c := range []struct {
		name  string
		parts []*sharelogv1.PartitionOwner
		n     int
		want  string
	}{
		{"an instance over its share", owned("x4", "a", "a", "a", "a", "b", "c"), 6, "owns 4 partitions"},
		{"a live instance owning none", owned("x4", "a", "a", "b", "b"), 4, "instance c owns 0"},
		{"a partition without owner", owned("x4", "a", "b", "c", "a", "b", ""), 6, "no owner"},
		{"an owner not live", owned("x4", "a", "b", "c", "a", "b", "d"), 6, "not one of"},
		{"a partition missing", owned("x4", "a", "b", "c", "a", "b"), 6, "5 of 6"},
		{"a partition beyond the count", owned("x4", "a", "b", "c", "a", "b", "c", "a"), 6, "partition 6 listed"},
		{"a partition twice", append(owned("x4", "a", "b", "c", "a", "b", "c"), &sharelogv1.PartitionOwner{Topic: "x4", Partition: 2, OwnerId: "c"}), 6, "listed twice"},
	} {
		if _, err := partitionSpread(c.parts, "x4", c.n, live); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	// One instance owns everything.
	if _, err := partitionSpread(owned("x4", "a", "a", "a", "a", "a", "a"), "x4", 6, []string{"a"}); err != nil {
		t.Fatalf("one instance: %v", err)
	}
}

func TestMovedPartitions(t *testing.T) {
	before := map[int32]string{0: "a", 1: "b", 2: "c"}
	if got := movedPartitions(before, map[int32]string{0: "a", 1: "b", 2: "c"}); len(got) != 0 {
		t.Fatalf("nothing moved: %v", got)
	}
	got := movedPartitions(before, map[int32]string{0: "a", 1: "c", 2: "c", 3: "a"})
	if want := []string{"1: b → c", "3: none → a"}; !slices.Equal(got, want) {
		t.Fatalf("moved %v, want %v", got, want)
	}
	if got := ownersText(map[int32]string{3: "b", 0: "a", 1: "b", 2: "a"}); got != "a: 0,2; b: 1,3" {
		t.Errorf("ownersText: %q", got)
	}
}

func TestX4Rows(t *testing.T) {
	// Every instance count once per run, the order reversed every other run.
	if got := x4Order(0); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("run 1 order %v", got)
	}
	if got := x4Order(1); !slices.Equal(got, []int{3, 2, 1}) {
		t.Errorf("run 2 order %v", got)
	}
	if !slices.Equal(x4Instances, []int{1, 2, 3}) {
		t.Errorf("instance counts %v, want 1, 2, 3", x4Instances)
	}
	for _, n := range x4Instances {
		if x4Partitions%n != 0 {
			t.Errorf("%d partitions do not spread evenly over %d instances", x4Partitions, n)
		}
	}
	// One informational row per instance count, then the judged ratio of 3
	// instances over 1 with its bar at 1.2×; then the same for the
	// share-consume phase, with no bar (the version-2 table has none).
	g := x4Group()
	k := len(x4Instances)
	if len(g.rows) != 2*(k+1) || g.ours == nil || !slices.Equal(g.ids, []string{"X4"}) {
		t.Fatalf("X4 group: %d rows, ids %v", len(g.rows), g.ids)
	}
	for i, n := range x4Instances {
		r := g.rows[i]
		if r.key != x4Key(n) || r.bar.Op != report.NoBar || !r.selfPeer || r.cpu {
			t.Errorf("row for %d instance(s): %+v", n, r)
		}
		r = g.rows[k+1+i]
		if r.key != x4ShareKey(n) || r.bar.Op != report.NoBar || !r.selfPeer || r.cpu {
			t.Errorf("share-consume row for %d instance(s): %+v", n, r)
		}
	}
	if r := g.rows[2*k+1]; r.key != "x4s" || r.bar.Op != report.NoBar || r.dir != report.Custom || !r.selfPeer {
		t.Errorf("share-consume ratio row: %+v", r)
	}
	bar := g.rows[k]
	if bar.key != "x4" || bar.bar.Op != report.AtMost || bar.bar.Threshold != 1.2 || bar.dir != report.Custom || !bar.selfPeer {
		t.Fatalf("bar row: %+v", bar)
	}
	// The ratio is ours (3 instances) over the self-peer (1 instance).
	o := newRunOut()
	m := newMeas(36)
	m.ratio = 36.0 / 30
	o.set("x4", m)
	o.set("x4#peer", newMeas(30))
	if r := aggregate(bar, []*runOut{o}, nil); r.Ratio != 1.2 || r.Verdict() != "met" {
		t.Errorf("1.2× must meet the bar: ratio %v, %s", r.Ratio, r.Verdict())
	}
	m.ratio = 37.0 / 30
	o.set("x4", m)
	if r := aggregate(bar, []*runOut{o}, nil); r.Verdict() != "**missed**" {
		t.Errorf("1.23× must miss the bar: %s", r.Verdict())
	}
}

func TestMultiMeterDoneEach(t *testing.T) {
	self := &proc{name: "self", pid: os.Getpid()}
	mm := phaseOf(self, self)
	deadline := time.Now().Add(30 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ { // some CPU for the meters to see
		_ = x * x
	}
	sum, each := mm.doneEach()
	if len(each) != 2 {
		t.Fatalf("%d results for 2 processes", len(each))
	}
	if sum.cpu != each[0].cpu+each[1].cpu || sum.rssMiB != each[0].rssMiB+each[1].rssMiB || sum.elapsed != each[0].elapsed {
		t.Fatalf("sum %+v is not the sum of %+v", sum, each)
	}
	if each[0].elapsed <= 0 || each[0].rssMiB <= 0 {
		t.Fatalf("nothing measured: %+v", each[0])
	}
}
