package jetstream

import (
	"encoding/hex"
	"fmt"
	"strconv"
)

// DefaultPrefix is the name prefix of every stream and bucket sharelog
// creates when none is configured.
const DefaultPrefix = "SL"

// MaxPrefixLen bounds a prefix so that stream names (prefix, a topic UUID
// and a partition number) stay far below JetStream's 255-character limit.
const MaxPrefixLen = 32

// CheckPrefix reports whether prefix can name streams, subjects and KV
// buckets: 1 to MaxPrefixLen characters of [A-Za-z0-9_-].
func CheckPrefix(prefix string) error {
	if prefix == "" || len(prefix) > MaxPrefixLen {
		return fmt.Errorf("jetstream name prefix %q must be 1 to %d characters long", prefix, MaxPrefixLen)
	}
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("jetstream name prefix %q contains %q; allowed are [A-Za-z0-9_-]", prefix, c)
		}
	}
	return nil
}

// StreamName is the stream holding one partition of the topic with id
// topicID: <prefix>_<topicID>_<partition>. The topic ID in the name makes a
// deleted and re-created topic a new stream.
func StreamName(prefix, topicID string, partition int32) string {
	return prefix + "_" + topicID + "_" + strconv.Itoa(int(partition))
}

// StreamPrefix is what the names of every partition stream of every topic
// under prefix start with.
func StreamPrefix(prefix string) string { return prefix + "_" }

// Subject is the only subject of a partition's stream:
// <prefix>.<topicID>.<partition>.
func Subject(prefix, topicID string, partition int32) string {
	return prefix + "." + topicID + "." + strconv.Itoa(int(partition))
}

// MetaBucket is the KV bucket of topic metadata.
func MetaBucket(prefix string) string { return prefix + "_META" }

// ShareBucket is the KV bucket of share-state snapshots.
func ShareBucket(prefix string) string { return prefix + "_SHARE" }

// OffsetsBucket is the KV bucket of the consumer groups' committed offsets.
func OffsetsBucket(prefix string) string { return prefix + "_OFFSETS" }

// TxnsBucket is the KV bucket of the Kafka transaction coordinator's
// state (one key per transactional id).
func TxnsBucket(prefix string) string { return prefix + "_TXNS" }

// UsersBucket is the KV bucket of the Kafka listener's SCRAM credentials.
func UsersBucket(prefix string) string { return prefix + "_USERS" }

// HexKey encodes arbitrary text (a topic or group name) as one KV key
// token: KV keys allow only [-/_=.a-zA-Z0-9] and no empty tokens, which
// names like "a..b" would make.
func HexKey(s string) string {
	if s == "" {
		return "_" // an empty token is not allowed; "_" is no hex string
	}
	return hex.EncodeToString([]byte(s))
}

// UnhexKey reverses HexKey.
func UnhexKey(tok string) (string, error) {
	if tok == "_" {
		return "", nil
	}
	b, err := hex.DecodeString(tok)
	return string(b), err
}
