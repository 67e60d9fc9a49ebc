package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// memberKeyPrefix starts the key of every instance's heartbeat in the lease
// bucket: member.<hex of the instance ID> (instance IDs may hold
// characters a KV key may not).
const memberKeyPrefix = "member."

// Member is what an instance says about itself in its heartbeat.
type Member struct {
	ID string `json:"id"`
	// Addr is the advertised gRPC address.
	Addr string `json:"addr"`
	// HTTPAddr is the REST gateway's address, empty when it is off.
	HTTPAddr string `json:"http_addr,omitempty"`
	// Mode is the instance's --cluster-mode: every instance of a
	// deployment must run the same one (docs/cluster.md).
	Mode string `json:"mode,omitempty"`
	// KafkaAddr is the Kafka listener's advertised host:port, empty when
	// the instance has no --kafka-addr; KafkaNodeID is then its Kafka
	// broker id (KafkaNodeID), the same across its restarts.
	KafkaAddr   string `json:"kafka_addr,omitempty"`
	KafkaNodeID int32  `json:"kafka_node_id,omitempty"`
	// DCPAddr is the DCP listener's advertised host:port, empty when the
	// instance has no --dcp-addr (docs/dcp.md "Cluster mode").
	DCPAddr string `json:"dcp_addr,omitempty"`
}

func memberKey(id string) string { return memberKeyPrefix + hex.EncodeToString([]byte(id)) }

// Heartbeat writes m's heartbeat key with a time to live of the lease TTL;
// an instance calls it every TTL/4 (Members.Run does), so its key expires
// TTL after it stops.
func (l *Lease) Heartbeat(ctx context.Context, m Member) error {
	if m.ID == "" {
		return errors.New("a member needs an instance ID")
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	msg := nats.NewMsg("$KV." + l.bucket + "." + memberKey(m.ID))
	msg.Data = data
	if _, err := l.js.PublishMsg(ctx, msg, njs.WithMsgTTL(l.o.TTL)); err != nil {
		return fmt.Errorf("write the heartbeat of %s: %w", m.ID, err)
	}
	return nil
}

// Leave deletes m's heartbeat key (a clean shutdown), so the others see it
// gone without waiting for the TTL.
func (l *Lease) Leave(ctx context.Context, id string) error {
	return l.kv.Delete(ctx, memberKey(id))
}

// Members lists the instances whose heartbeat has not expired, sorted by ID.
func (l *Lease) Members(ctx context.Context) ([]Member, error) {
	w, err := l.kv.WatchFiltered(ctx, []string{memberKeyPrefix + ">"}, njs.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list the cluster members: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []Member
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list the cluster members: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("list the cluster members: the watch ended")
			}
			if e == nil { // every current value seen
				slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
				return out, nil
			}
			if e.Operation() != njs.KeyValuePut {
				continue
			}
			var m Member
			if json.Unmarshal(e.Value(), &m) != nil || m.ID == "" {
				continue // not ours to judge; it expires
			}
			out = append(out, m)
		}
	}
}

// RunHeartbeat writes m's heartbeat every TTL/4 until ctx ends, then
// deletes it.
func (l *Lease) RunHeartbeat(ctx context.Context, m Member) {
	for {
		hctx, cancel := context.WithTimeout(ctx, l.interval())
		if err := l.Heartbeat(hctx, m); err != nil && ctx.Err() == nil {
			l.o.Logger.Debug("heartbeat failed", "err", err)
		}
		cancel()
		t := time.NewTimer(l.interval())
		select {
		case <-ctx.Done():
			t.Stop()
			dctx, dcancel := context.WithTimeout(context.Background(), l.interval())
			if err := l.Leave(dctx, m.ID); err != nil {
				l.o.Logger.Debug("could not delete the heartbeat; it expires after its TTL", "err", err)
			}
			dcancel()
			return
		case <-t.C:
		}
	}
}

// secretKey holds the cluster's instance secret in the lease bucket.
const secretKey = "instance-secret"

// Secret returns the cluster's instance secret: 32 random bytes, hex, made
// by the first instance that asks and kept in the lease bucket (no TTL).
// Instances present it on the calls they make on their own behalf to one
// another (a dead-letter copy appended at another partition's owner), as
// Kafka brokers use an inter-broker principal. Anyone who can read the
// bucket can read it — as anyone with those NATS permissions can read and
// write every record directly.
func (l *Lease) Secret(ctx context.Context) (string, error) {
	for {
		e, err := l.kv.Get(ctx, secretKey)
		if err == nil && len(e.Value()) == 64 {
			return string(e.Value()), nil
		}
		if err != nil && !errors.Is(err, njs.ErrKeyNotFound) {
			return "", fmt.Errorf("read the instance secret: %w", err)
		}
		if err == nil {
			return "", fmt.Errorf("the instance secret in %s is damaged (%d bytes; delete the key %s and restart)", l.bucket, len(e.Value()), secretKey)
		}
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		if _, err := l.kv.Create(ctx, secretKey, []byte(hex.EncodeToString(b[:]))); err != nil && !errors.Is(err, njs.ErrKeyExists) {
			return "", fmt.Errorf("write the instance secret: %w", err)
		}
		// Created here or by another instance at the same moment: read
		// what won.
	}
}

// Kafka broker ids (docs/cluster.md "Kafka listener"): instance IDs are
// strings, Kafka's node ids small integers. Each instance gets the
// smallest id no other instance has ever taken, recorded twice in the
// lease bucket without a TTL: kafka-node.<n> names the instance that
// took n (a create, so two instances never take the same n) and
// kafka-broker.<hex of the instance ID> its n (so it keeps it across
// restarts).
const (
	kafkaNodePrefix   = "kafka-node."
	kafkaBrokerPrefix = "kafka-broker."
)

// KafkaNodeID returns the Kafka node id of the instance id, allocating
// one on its first call for id.
func (l *Lease) KafkaNodeID(ctx context.Context, id string) (int32, error) {
	if id == "" {
		return 0, errors.New("a Kafka node id needs an instance ID")
	}
	own := kafkaBrokerPrefix + hex.EncodeToString([]byte(id))
	if e, err := l.kv.Get(ctx, own); err == nil {
		n, perr := strconv.ParseInt(string(e.Value()), 10, 32)
		if perr != nil || n < 0 {
			return 0, fmt.Errorf("the Kafka node id of %s in %s is damaged (%q; delete the key %s and restart)", id, l.bucket, e.Value(), own)
		}
		return int32(n), nil
	} else if !errors.Is(err, njs.ErrKeyNotFound) {
		return 0, fmt.Errorf("read the Kafka node id of %s: %w", id, err)
	}
	for n := int32(0); n >= 0; n++ {
		key := kafkaNodePrefix + strconv.Itoa(int(n))
		_, err := l.kv.Create(ctx, key, []byte(id))
		if errors.Is(err, njs.ErrKeyExists) {
			e, gerr := l.kv.Get(ctx, key)
			if errors.Is(gerr, njs.ErrKeyNotFound) {
				// A replica answering the read has not the create yet:
				// read n again.
				select {
				case <-ctx.Done():
					return 0, fmt.Errorf("read the Kafka node id %d: %w", n, ctx.Err())
				case <-time.After(20 * time.Millisecond):
				}
				n--
				continue
			}
			if gerr != nil {
				return 0, fmt.Errorf("read the Kafka node id %d: %w", n, gerr)
			}
			if string(e.Value()) != id {
				continue // another instance's
			}
			// Taken by this instance before a crash kept it from writing
			// its own key.
		} else if err != nil {
			return 0, fmt.Errorf("take the Kafka node id %d: %w", n, err)
		}
		if _, err := l.kv.Put(ctx, own, []byte(strconv.Itoa(int(n)))); err != nil {
			return 0, fmt.Errorf("record the Kafka node id of %s: %w", id, err)
		}
		return n, nil
	}
	return 0, errors.New("no Kafka node id is left")
}

// kafkaClusterIDKey holds the deployment's Kafka cluster id in the lease
// bucket (no TTL): every broker answers Metadata with the same one.
const kafkaClusterIDKey = "kafka-cluster-id"

// KafkaClusterID returns the deployment's Kafka cluster id, recording
// fresh as it when there is none yet (the first instance to ask wins).
func (l *Lease) KafkaClusterID(ctx context.Context, fresh string) (string, error) {
	for {
		e, err := l.kv.Get(ctx, kafkaClusterIDKey)
		if err == nil && len(e.Value()) > 0 {
			return string(e.Value()), nil
		}
		if err != nil && !errors.Is(err, njs.ErrKeyNotFound) {
			return "", fmt.Errorf("read the Kafka cluster id: %w", err)
		}
		if err == nil {
			return "", fmt.Errorf("the Kafka cluster id in %s is empty (delete the key %s and restart)", l.bucket, kafkaClusterIDKey)
		}
		if _, err := l.kv.Create(ctx, kafkaClusterIDKey, []byte(fresh)); err != nil && !errors.Is(err, njs.ErrKeyExists) {
			return "", fmt.Errorf("write the Kafka cluster id: %w", err)
		}
	}
}
