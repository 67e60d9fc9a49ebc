package router

import "github.com/sharelog/sharelog/client/partitioner"

// Partition is the partition of n that a record with key goes to when it
// is produced without one: murmur2(key) % n, as the server and Kafka's
// default partitioner pick (docs/produce.md "Where records go"). key must not be nil.
func Partition(key []byte, n int32) int32 {
	return partitioner.ForKey(key, n)
}
