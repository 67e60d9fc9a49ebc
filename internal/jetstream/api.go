package jetstream

import (
	"context"
	"encoding/json"
	"fmt"

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
