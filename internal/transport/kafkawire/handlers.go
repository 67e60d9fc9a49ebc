package kafkawire

import (
	"context"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const apiVersionsKey = 18

// handlerFunc serves one decoded request. A nil response sends nothing
// (acks=0 produce); an error closes the connection.
type handlerFunc func(l *Listener, ctx context.Context, c *conn, req kmsg.Request) (kmsg.Response, error)

// handler is one served API key and the versions it is tested with. The
// ApiVersions answer is generated from this table, so only what is here is
// advertised.
type handler struct {
	min, max int16
	fn       handlerFunc
}

// handlerTable lists every served API. Floors follow Kafka 4's baseline
// (KIP-896) where they matter (Produce 3, Fetch 4); ceilings stop before
// the version that would need a feature this listener lacks (Produce and
// Fetch v13 address topics by id, ListOffsets v9 tiered storage).
func (l *Listener) handlerTable() map[int16]handler {
	t := map[int16]handler{
		0:              {3, 12, (*Listener).handleProduce},
		1:              {4, 12, (*Listener).handleFetch},
		2:              {1, 8, (*Listener).handleListOffsets},
		3:              {1, 12, (*Listener).handleMetadata},
		10:             {0, 6, (*Listener).handleFindCoordinator},
		apiVersionsKey: {0, 3, (*Listener).handleAPIVersions},
		19:             {2, 7, (*Listener).handleCreateTopics},
		20:             {1, 6, (*Listener).handleDeleteTopics},
		21:             {0, 2, (*Listener).handleDeleteRecords},
		32:             {1, 4, (*Listener).handleDescribeConfigs},
		33:             {0, 2, (*Listener).handleAlterConfigs},
		37:             {0, 3, (*Listener).handleCreatePartitions},
		44:             {0, 1, (*Listener).handleIncrementalAlterConfigs},
	}
	if l.cfg.Cluster != nil || l.log.AllocatesProducerIDs() {
		// Without it a client would fail to init instead of falling
		// back to a producer without idempotence.
		t[22] = handler{0, 5, (*Listener).handleInitProducerID}
	}
	if l.servesTxn() {
		for k, h := range txnHandlers {
			t[k] = h
		}
	}
	for k, h := range aclHandlers {
		t[k] = h
	}
	if l.cfg.Users != nil {
		for k, h := range userHandlers {
			t[k] = h
		}
	}
	for k, h := range leaderEpochHandlers {
		t[k] = h
	}
	if l.cfg.Share != nil || l.cfg.Cluster != nil {
		for k, h := range shareHandlers {
			t[k] = h
		}
	}
	if l.cfg.Groups != nil || l.cfg.Cluster != nil {
		for k, h := range groupHandlers {
			t[k] = h
		}
	}
	if l.cfg.Share != nil || l.cfg.Groups != nil || l.cfg.Cluster != nil {
		t[listGroupsKey] = handler{0, 5, (*Listener).handleListGroups}
		t[deleteGroupsKey] = handler{0, 2, (*Listener).handleDeleteGroups}
	}
	return t
}

// shareHandlers are added by the share-group files.
var shareHandlers = map[int16]handler{}

func apiName(key int16) string { return kmsg.NameForKey(key) }

// apiKeys is the ApiVersions list, sorted by key.
func (l *Listener) apiKeys() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(l.handlers))
	for k, h := range l.handlers {
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: h.min, MaxVersion: h.max})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}
