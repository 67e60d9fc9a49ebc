package testsupport

import (
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// Range is one acquired range of a ShareFetch response.
type Range struct {
	First, Last int64
	Count       int32 // delivery count
}

// Acquired returns a partition response's acquired ranges, in order.
func Acquired(pr *sharelogv1.ShareFetchPartitionResponse) []Range {
	var out []Range
	for _, a := range pr.GetAcquiredRecords() {
		out = append(out, Range{First: a.GetFirstOffset(), Last: a.GetLastOffset(), Count: a.GetDeliveryCount()})
	}
	return out
}

// AcquiredAll returns the acquired ranges of every partition of a
// ShareFetch response, in response order.
func AcquiredAll(resp *sharelogv1.ShareFetchResponse) []Range {
	var out []Range
	for _, tr := range resp.GetResponses() {
		for _, pr := range tr.GetPartitions() {
			out = append(out, Acquired(pr)...)
		}
	}
	return out
}

// PartitionOf returns one partition's entry of a ShareFetch response, nil
// if it has none.
func PartitionOf(resp *sharelogv1.ShareFetchResponse, topic string, p int32) *sharelogv1.ShareFetchPartitionResponse {
	for _, tr := range resp.GetResponses() {
		if tr.GetTopic() != topic {
			continue
		}
		for _, pr := range tr.GetPartitions() {
			if pr.GetPartition() == p {
				return pr
			}
		}
	}
	return nil
}
