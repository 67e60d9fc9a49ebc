package dcpwire

// Cluster mode (docs/dcp.md "Cluster mode"): with --store jetstream the
// listener serves the vBuckets (partitions) this instance serves, and its
// bucket config names every live instance's DCP address and each
// vBucket's owner, so a DCP client connects to every node it needs. A
// stream request for a vBucket served elsewhere answers NOT_MY_VBUCKET
// with the current config, as Couchbase does, and a stream whose
// partition moves away ends with STREAM_END "state changed", after which
// the client resumes at the new owner with its seqno and vbuuid (the
// vbuuid comes from the topic id, the same on every instance).

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/couchbase/gocbcore/v10/memd"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/changestream"
)

// Cluster is the listener's view of the cluster this instance is part of.
type Cluster interface {
	// Domain is what a request is served by now: the log domain (topics,
	// partitions, bounds) and, when this instance serves partitions, the
	// change streams (nil on a standby). done ends the request's use of
	// it; a stream holds it while it runs. An error means nothing can be
	// served yet (answered ETMPFAIL).
	Domain() (Domain, func(), error)
	// Map is the bucket config's placement of topic t: the live nodes
	// and the node serving each partition.
	Map(ctx context.Context, t broker.Topic) Map
	// Serve reports whether this instance serves the partition of the
	// topic with id topicID now. moved, if not nil, is closed when it
	// stops serving it (the partition moved to another instance).
	Serve(topicID string, part int32) (moved <-chan struct{}, ok bool)
}

// Domain is the log domain and change streams of one request.
type Domain struct {
	Log     *broker.Log
	Streams *changestream.Manager
}

// Node is one instance in a bucket config: its advertised DCP address.
type Node struct {
	Host string
	Port int
}

// Map is the placement of a topic's partitions.
type Map struct {
	// Rev is the config's revision: it grows whenever a partition's
	// owner changes (and with the partition count).
	Rev int64
	// Nodes are the live instances with a DCP listener; Self is this
	// instance's index among them (-1 if absent).
	Nodes []Node
	Self  int
	// Owners has, per partition, the index in Nodes of the node serving
	// it, -1 when none does now.
	Owners []int
}

var errNoDomain = errors.New("this instance serves no partition yet; retry")

// domain is the log domain and change streams for a request, and the
// function that ends its use.
func (l *Listener) domain() (Domain, func(), error) {
	if l.cfg.Cluster == nil {
		return Domain{Log: l.log, Streams: l.streams}, func() {}, nil
	}
	d, done, err := l.cfg.Cluster.Domain()
	if err != nil {
		return Domain{}, nil, err
	}
	if d.Log == nil {
		done()
		return Domain{}, nil, errNoDomain
	}
	return d, done, nil
}

// describe is DescribeTopic of the selected bucket in the current domain.
func (c *conn) describe() (broker.Topic, error) {
	d, done, err := c.l.domain()
	if err != nil {
		return broker.Topic{}, err
	}
	defer done()
	return d.Log.DescribeTopic(c.withPrincipal(c.ctx), c.bucket)
}

// notMyVBucket answers req NOT_MY_VBUCKET with the current bucket config
// of t in the body, so that the client refreshes its map (gocbcore reads
// it and sends the request to the new owner).
func (c *conn) notMyVBucket(req *packet, t broker.Topic) []byte {
	b, err := json.Marshal(c.l.bucketConfig(c.ctx, t))
	if err != nil {
		return failure(req, memd.StatusNotMyVBucket, err.Error(), c.features[memd.FeatureXerror])
	}
	h := response(req, memd.StatusNotMyVBucket)
	if c.features[memd.FeatureJSON] {
		h.datatype = datatypeJSON
	}
	return appendPacket(nil, h, nil, nil, b)
}
