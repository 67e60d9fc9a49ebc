// Package partitioner is where a keyed record goes: Kafka's default
// partitioner (murmur2 of the key, sign bit cleared, modulo the partition
// count), shared by the server's log (internal/broker) and the routing
// client (client/router) so that both always pick the same partition
// (docs/produce.md "Where records go"). It imports only the standard
// library.
package partitioner

// ForKey is the partition of n that a record with a non-nil key goes to
// when it is produced without one.
func ForKey(key []byte, n int32) int32 {
	return int32(toPositive(Murmur2(key)) % uint32(n))
}

// Murmur2 is Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils.murmur2).
func Murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	for i := 0; i+4 <= length; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[length&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// toPositive is Kafka's Utils.toPositive: it clears the sign bit.
func toPositive(n int32) uint32 { return uint32(n) & 0x7fffffff }
