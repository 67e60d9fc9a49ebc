package dcpwire

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"testing"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// fixedCluster is a Cluster whose map is m.
type fixedCluster struct{ m Map }

func (f fixedCluster) Domain() (Domain, func(), error)             { return Domain{}, func() {}, errNoDomain }
func (f fixedCluster) Map(context.Context, broker.Topic) Map       { return f.m }
func (f fixedCluster) Serve(string, int32) (<-chan struct{}, bool) { return nil, false }

// TestClusterBucketConfig: in cluster mode the bucket config lists the
// map's nodes in one order in nodes, nodesExt and the server list (the
// index the vBucket map gives is the same in all three, as gocbcore reads
// it), marks this node, places each vBucket on its owner's index (-1 for
// none, or an owner the node list does not have) and carries the map's rev.
func TestClusterBucketConfig(t *testing.T) {
	m := Map{Rev: 7 << 16, Nodes: []Node{{"10.0.0.1", 11210}, {"10.0.0.2", 11211}}, Self: 1, Owners: []int{1, 0, -1, 5}}
	topic := broker.Topic{Info: logstore.TopicInfo{Name: "t", ID: "id-1", Partitions: 5}, Partitions: make([]logstore.PartitionInfo, 5)}
	for _, withTLS := range []bool{false, true} {
		l := &Listener{cfg: Config{Cluster: fixedCluster{m}}}
		kv := "kv"
		if withTLS {
			l.cfg.TLS, kv = &tls.Config{}, "kvSSL"
		}
		b, err := json.Marshal(l.bucketConfig(context.Background(), topic))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Rev   int64 `json:"rev"`
			Nodes []struct {
				Hostname string `json:"hostname"`
			} `json:"nodes"`
			NodesExt []struct {
				Hostname string         `json:"hostname"`
				Services map[string]int `json:"services"`
				ThisNode bool           `json:"thisNode"`
			} `json:"nodesExt"`
			Map struct {
				ServerList []string `json:"serverList"`
				VBuckets   [][]int  `json:"vBucketMap"`
			} `json:"vBucketServerMap"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Rev != m.Rev {
			t.Errorf("rev %d, want %d", got.Rev, m.Rev)
		}
		want := []string{"10.0.0.1:11210", "10.0.0.2:11211"}
		if len(got.Nodes) != 2 || len(got.NodesExt) != 2 || len(got.Map.ServerList) != 2 {
			t.Fatalf("nodes %s", b)
		}
		for i, hp := range want {
			n := m.Nodes[i]
			if got.Nodes[i].Hostname != hp || got.Map.ServerList[i] != hp || got.NodesExt[i].Hostname != n.Host ||
				got.NodesExt[i].Services[kv] != n.Port || got.NodesExt[i].ThisNode != (i == m.Self) {
				t.Errorf("node %d: %s", i, b)
			}
		}
		wantVB := []int{1, 0, -1, -1, -1} // 5: not a node; partition 4: no owner given
		if len(got.Map.VBuckets) != len(wantVB) {
			t.Fatalf("vBucket map %v", got.Map.VBuckets)
		}
		for vb, o := range wantVB {
			if len(got.Map.VBuckets[vb]) != 1 || got.Map.VBuckets[vb][0] != o {
				t.Errorf("vBucket %d: %v, want [%d]", vb, got.Map.VBuckets[vb], o)
			}
		}
	}
}
