package kafkawire

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestShareAdminThroughKadm: list, describe, alter, describe offsets and
// delete offsets of a share group with kadm.
func TestShareAdminThroughKadm(t *testing.T) {
	f := newShareFixture(t)
	f.createTopic("q", 2)
	produceN(t, f.client(kgo.RecordPartitioner(kgo.ManualPartitioner())), "q", 0, 5, time.Now())
	ctx := testCtx(t)
	adm := f.admin()

	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "q", Partition: 0, At: 3})
	os.Add(kadm.Offset{Topic: "q", Partition: 1, At: 0})
	altered, err := adm.AlterShareGroupOffsets(ctx, "g", os)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := altered.Lookup("q", 0); !ok || e != nil {
		t.Fatalf("alter q/0: %v %v", ok, e)
	}

	listed, err := adm.ListGroupsByType(ctx, []string{"share"})
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := listed["g"]; !ok || g.GroupType != "share" || g.State != "Empty" {
		t.Fatalf("listed %+v", listed)
	}
	if none, err := adm.ListGroupsByType(ctx, []string{"classic"}); err != nil || len(none) != 0 {
		t.Fatalf("classic groups: %v %v", none, err)
	}

	described, err := adm.DescribeShareGroupOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	d := described["g"]
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	if o, _ := d.Offsets.Lookup("q", 0); o.Err != nil || o.StartOffset != 3 || o.Lag != 2 {
		t.Fatalf("q/0 offsets %+v", o)
	}

	// A member joins: the group is Stable, and its offsets cannot change.
	m := f.rawMember("a", "q")
	groups, err := adm.DescribeShareGroups(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if g := groups["g"]; g.Err != nil || g.GroupState != "Stable" || len(g.Members) != 1 || g.Members[0].MemberID != "a" {
		t.Fatalf("described %+v", g)
	}
	if _, err := adm.DeleteShareGroupOffsets(ctx, "g", "q"); !errors.Is(err, kerr.NonEmptyGroup) {
		t.Fatalf("delete offsets of a non-empty group: %v", err)
	}
	m.c.nc.Close()
	if g, _ := adm.DescribeShareGroups(ctx, "nope"); g["nope"].Err == nil {
		t.Fatalf("unknown group described without an error: %+v", g["nope"])
	}
}
