package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// apiPrefix is the default JetStream API subject prefix.
const apiPrefix = "$JS.API."

type apiResponse struct {
	Error *njs.APIError `json:"error,omitempty"`
}

// Request sends one JetStream API request (subject relative to $JS.API.)
// and decodes the answer into resp (which may be nil). An API error comes
// back as a *jetstream.APIError.
func Request(ctx context.Context, nc *nats.Conn, subject string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	msg, err := nc.RequestWithContext(ctx, apiPrefix+subject, body)
	if err != nil {
		return err
	}
	var ar apiResponse
	if err := json.Unmarshal(msg.Data, &ar); err != nil {
		return fmt.Errorf("undecodable JetStream API answer to %s: %w", subject, err)
	}
	if ar.Error != nil {
		return ar.Error
	}
	if resp != nil {
		if err := json.Unmarshal(msg.Data, resp); err != nil {
			return fmt.Errorf("undecodable JetStream API answer to %s: %w", subject, err)
		}
	}
	return nil
}

// StoredMsg is a message read from a stream by sequence.
type StoredMsg struct {
	Subject  string `json:"subject"`
	Sequence uint64 `json:"seq"`
	Data     []byte `json:"data"`
}

// GetMsg reads the message at seq from the stream leader (not through
// direct get, which a lagging follower may answer). A sequence that is not
// stored gives an *APIError with CodeNoMessageFound.
func GetMsg(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (StoredMsg, error) {
	var resp struct {
		Message *StoredMsg `json:"message"`
	}
	if err := Request(ctx, nc, "STREAM.MSG.GET."+stream, map[string]uint64{"seq": seq}, &resp); err != nil {
		return StoredMsg{}, err
	}
	if resp.Message == nil {
		return StoredMsg{}, fmt.Errorf("JetStream answered a get of %s sequence %d without a message", stream, seq)
	}
	return *resp.Message, nil
}

// Purge removes every message of stream below sequence seq and returns how
// many it removed.
func Purge(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (uint64, error) {
	var resp struct {
		Purged uint64 `json:"purged"`
	}
	err := Request(ctx, nc, "STREAM.PURGE."+stream, map[string]uint64{"seq": seq}, &resp)
	return resp.Purged, err
}

// attemptTimeout bounds one try of an idempotent JetStream API call in
// Retry: a request the meta leader dropped (it was being elected, or a
// peer was briefly marked offline) is sent again instead of waiting out the
// caller's whole deadline.
const attemptTimeout = 5 * time.Second

// Retry runs an idempotent JetStream API call (creating a stream or bucket
// with a fixed configuration) until it succeeds, fails for a reason other
// than a transient one, or ctx ends. Transient: the attempt timed out, no
// server answered, or no peer could take the placement yet.
func Retry(ctx context.Context, call func(ctx context.Context) error) error {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := call(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
	}
}

func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) {
		return true
	}
	var apiErr *njs.APIError
	// 10005: "no suitable peers for placement" (a peer not current yet).
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10005
}

// WaitLeader waits until the stream has an elected leader that answers:
// JetStream acknowledges a stream's creation before its replicas have
// elected one, and a read or write in between finds no responder.
func WaitLeader(ctx context.Context, js njs.JetStream, stream string) error {
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 200*time.Millisecond) {
		// Each request bounded as in Retry: a stream-info request the
		// server dropped would otherwise wait out the whole of ctx.
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		st, err := js.Stream(actx, stream)
		cancel()
		if err == nil {
			if ci := st.CachedInfo().Cluster; ci == nil || ci.Leader != "" {
				return nil
			}
		} else if !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
}

// OpenKV creates the KV bucket (one value per key, file storage, replicas
// replicas) or opens it when it exists, retrying what Retry retries, and
// waits until its stream has a leader. The stores of the share state, the
// committed offsets and the SCRAM credentials open theirs with it.
func OpenKV(ctx context.Context, js njs.JetStream, bucket, description string, replicas int) (njs.KeyValue, error) {
	var kv njs.KeyValue
	err := Retry(ctx, func(ctx context.Context) (err error) {
		kv, err = js.CreateKeyValue(ctx, njs.KeyValueConfig{
			Bucket:      bucket,
			Description: description,
			History:     1,
			Storage:     njs.FileStorage,
			Replicas:    replicas,
		})
		return err
	})
	if errors.Is(err, njs.ErrBucketExists) {
		err = Retry(ctx, func(ctx context.Context) (err error) {
			kv, err = js.KeyValue(ctx, bucket)
			return err
		})
	}
	if err == nil {
		err = WaitLeader(ctx, js, "KV_"+bucket)
	}
	return kv, err
}

// BucketDefaults fills a KV store's options as every store of this
// module does: the default prefix (then checked), 3 replicas, a 10 s
// timeout per call.
func BucketDefaults(prefix *string, replicas *int, timeout *time.Duration) error {
	if *prefix == "" {
		*prefix = DefaultPrefix
	}
	if err := CheckPrefix(*prefix); err != nil {
		return err
	}
	if *replicas == 0 {
		*replicas = 3
	}
	if *timeout <= 0 {
		*timeout = 10 * time.Second
	}
	return nil
}
