package dcpwire

// The non-DCP part of a client's bootstrap (docs/dcp.md "Bootstrap"):
// HELLO, GET_ERROR_MAP, SELECT_BUCKET (bucket = topic) and
// GET_CLUSTER_CONFIG (a terse bucket config with one vBucket per
// partition, all on this node).

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"strconv"

	"github.com/couchbase/gocbcore/v10/memd"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// served are the HELLO features this listener agrees to; a client asking
// for others gets them left out of the answer, as Couchbase does. The
// informational ones (TLS, TCP delay, XATTR: no document here has
// extended attributes) change nothing on the wire; Collections prefixes
// the keys of DCP mutations and deletions with the collection id (0).
var served = map[memd.HelloFeature]bool{
	memd.FeatureDatatype:     true,
	memd.FeatureTLS:          true,
	memd.FeatureTCPNoDelay:   true,
	memd.FeatureXattr:        true,
	memd.FeatureXerror:       true,
	memd.FeatureSelectBucket: true,
	memd.FeatureJSON:         true,
	memd.FeatureDuplex:       true,
	memd.FeatureAltRequests:  true,
	memd.FeatureCollections:  true, // the default scope and collection only (collections.go)
}

// hello answers HELLO: the key is the client's agent name, the value the
// features it asks for (two bytes each); the answer lists those served.
func (c *conn) hello(p *packet) error {
	if len(p.value)%2 != 0 {
		return c.fail(p, memd.StatusInvalidArgs, "HELLO features must be two bytes each")
	}
	clear(c.features)
	var out []byte
	for i := 0; i+1 < len(p.value); i += 2 {
		f := memd.HelloFeature(binary.BigEndian.Uint16(p.value[i:]))
		if served[f] && !c.features[f] {
			c.features[f] = true
			out = binary.BigEndian.AppendUint16(out, uint16(f))
		}
	}
	c.l.logger.Debug("dcp HELLO", "remote", c.nc.RemoteAddr().String(), "agent", string(p.key), "features", len(out)/2)
	return c.reply(p, memd.StatusSuccess, nil, nil, out)
}

// errorMapJSON is the error map (version 1 layout, which version 2
// readers accept) of the statuses this listener answers with.
var errorMapJSON = func() []byte {
	type entry struct {
		Name  string   `json:"name"`
		Desc  string   `json:"desc"`
		Attrs []string `json:"attrs"`
	}
	m := map[string]entry{
		"4":  {"EINVAL", "Invalid arguments", []string{"invalid-input"}},
		"7":  {"NOT_MY_VBUCKET", "No such partition on this node", []string{"fetch-config", "invalid-input"}},
		"8":  {"NO_BUCKET", "No bucket (topic) selected", []string{"conn-state-invalidated"}},
		"20": {"AUTH_ERROR", "Authentication failed", []string{"auth", "conn-state-invalidated"}},
		"21": {"AUTH_CONTINUE", "Continue authentication", []string{"support", "auth"}},
		"22": {"ERANGE", "Start seqno above the partition's high seqno", []string{"invalid-input"}},
		"23": {"ROLLBACK", "Roll back to the seqno in the value", []string{"success"}},
		"24": {"EACCESS", "No access", []string{"conn-state-invalidated", "item-only"}},
		"81": {"UNKNOWN_COMMAND", "Unknown command", []string{"support"}},
		"83": {"NOT_SUPPORTED", "Not supported", []string{"support"}},
		"84": {"EINTERNAL", "Internal error", []string{"internal"}},
		"86": {"ETMPFAIL", "Temporary failure; retry", []string{"temp", "retry-later"}},
		"88": {"UNKNOWN_COLLECTION", "Only the default collection exists", []string{"item-only", "fetch-config"}},
	}
	b, err := json.Marshal(map[string]any{"version": 1, "revision": 1, "errors": m})
	if err != nil {
		panic(err)
	}
	return b
}()

func (c *conn) errorMap(p *packet) error {
	return c.reply(p, memd.StatusSuccess, nil, nil, errorMapJSON)
}

// selectBucket answers SELECT_BUCKET: the key names a topic, which the
// caller must be allowed to DESCRIBE; a topic that does not exist or may
// not be described answers EACCESS, as Couchbase answers for a bucket.
func (c *conn) selectBucket(p *packet) error {
	name := string(p.key)
	if c.dcpOpen {
		return c.fail(p, memd.StatusNotSupported, "the bucket of a DCP connection cannot change")
	}
	ctx := c.withPrincipal(c.ctx)
	if err := c.l.cfg.Guard.Require(ctx, authz.Describe, authz.Topic, name); err != nil {
		return c.fail(p, memd.StatusAccessError, "no access to topic "+strconv.Quote(name))
	}
	d, done, err := c.l.domain()
	if err != nil {
		return c.fail(p, memd.StatusTmpFail, err.Error())
	}
	_, err = d.Log.DescribeTopic(ctx, name)
	done()
	if err != nil {
		if reasonOf(err) == apierr.UnknownTopicOrPartition || reasonOf(err) == apierr.InvalidRequest {
			return c.fail(p, memd.StatusAccessError, "no topic "+strconv.Quote(name))
		}
		return c.fail(p, memd.StatusTmpFail, err.Error())
	}
	c.bucket = name
	return c.reply(p, memd.StatusSuccess, nil, nil, nil)
}

func reasonOf(err error) apierr.Reason {
	if ae := broker.ErrorOf(err); ae != nil {
		return ae.Reason
	}
	return ""
}

// The terse bucket config (docs/dcp.md "Bucket config").
type (
	bucketConfig struct {
		Rev          int64          `json:"rev"`
		RevEpoch     int64          `json:"revEpoch"`
		Name         string         `json:"name"`
		UUID         string         `json:"uuid"`
		NodeLocator  string         `json:"nodeLocator"`
		Capabilities []string       `json:"bucketCapabilities"`
		Nodes        []configNode   `json:"nodes"`
		NodesExt     []configNodeEx `json:"nodesExt"`
		VBucketMap   vbucketMap     `json:"vBucketServerMap"`
	}
	configNode struct {
		Hostname string         `json:"hostname"`
		Ports    map[string]int `json:"ports"`
	}
	configNodeEx struct {
		Services map[string]int `json:"services"`
		Hostname string         `json:"hostname"`
		ThisNode bool           `json:"thisNode"`
	}
	vbucketMap struct {
		HashAlgorithm string   `json:"hashAlgorithm"`
		NumReplicas   int      `json:"numReplicas"`
		ServerList    []string `json:"serverList"`
		VBucketMap    [][]int  `json:"vBucketMap"`
	}
)

// clusterConfig answers GET_CLUSTER_CONFIG with the selected topic's
// bucket config: one vBucket per partition, every one active on this node
// (index 0 of the server list), or in cluster mode on the node serving
// it. Its rev is the partition count, so a topic that grows partitions
// gives a newer config; in cluster mode the map's (Map.Rev).
func (c *conn) clusterConfig(p *packet) error {
	if c.bucket == "" {
		return c.fail(p, memd.StatusNoBucket, "select a bucket (a topic) first")
	}
	t, err := c.describe()
	if err != nil {
		return c.fail(p, memd.StatusTmpFail, err.Error())
	}
	b, err := json.Marshal(c.l.bucketConfig(c.ctx, t))
	if err != nil {
		return err
	}
	return c.reply(p, memd.StatusSuccess, nil, nil, b)
}

func (l *Listener) bucketConfig(ctx context.Context, t broker.Topic) bucketConfig {
	services := func(port int) map[string]int {
		if l.cfg.TLS != nil {
			return map[string]int{"kvSSL": port, "mgmtSSL": port}
		}
		return map[string]int{"kv": port, "mgmt": port}
	}
	cfg := bucketConfig{
		RevEpoch: 1, Name: t.Info.Name, UUID: t.Info.ID, NodeLocator: "vbucket",
		Capabilities: []string{"cccp", "dcp", "xattr", "nodesExt", "collections"},
		VBucketMap:   vbucketMap{HashAlgorithm: "CRC", NumReplicas: 0, VBucketMap: make([][]int, len(t.Partitions))},
	}
	if l.cfg.Cluster == nil {
		hostPort := net.JoinHostPort(l.host, strconv.Itoa(l.port))
		if l.host == "$HOST" {
			hostPort = "$HOST:" + strconv.Itoa(l.port) // the client substitutes the literal
		}
		cfg.Rev = int64(len(t.Partitions))
		cfg.Nodes = []configNode{{Hostname: hostPort, Ports: map[string]int{"direct": l.port}}}
		cfg.NodesExt = []configNodeEx{{Services: services(l.port), Hostname: l.host, ThisNode: true}}
		cfg.VBucketMap.ServerList = []string{hostPort}
		for i := range cfg.VBucketMap.VBucketMap {
			cfg.VBucketMap.VBucketMap[i] = []int{0}
		}
		return cfg
	}
	// Cluster mode: nodes, nodesExt and the server list in the same order,
	// as gocbcore reads the KV nodes of nodesExt by the index the vBucket
	// map gives (docs/dcp.md "Cluster mode").
	m := l.cfg.Cluster.Map(ctx, t)
	cfg.Rev = m.Rev
	cfg.Nodes, cfg.NodesExt, cfg.VBucketMap.ServerList = []configNode{}, []configNodeEx{}, []string{}
	for i, n := range m.Nodes {
		hostPort := net.JoinHostPort(n.Host, strconv.Itoa(n.Port))
		cfg.Nodes = append(cfg.Nodes, configNode{Hostname: hostPort, Ports: map[string]int{"direct": n.Port}})
		cfg.NodesExt = append(cfg.NodesExt, configNodeEx{Services: services(n.Port), Hostname: n.Host, ThisNode: i == m.Self})
		cfg.VBucketMap.ServerList = append(cfg.VBucketMap.ServerList, hostPort)
	}
	for i := range cfg.VBucketMap.VBucketMap {
		o := -1
		if i < len(m.Owners) && m.Owners[i] < len(m.Nodes) {
			o = m.Owners[i]
		}
		cfg.VBucketMap.VBucketMap[i] = []int{o}
	}
	return cfg
}

// errorf is a formatted reason text.
func errorf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
