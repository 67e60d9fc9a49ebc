package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// BenchmarkShareAcknowledge times the ShareAcknowledge (ACCEPT) of n
// records just acquired by ShareFetch, over real gRPC, the shape of
// benchmark row C2; ns/op counts the whole produce-fetch-ack loop,
// ack-ns/op the acknowledgement only.
//
//	go test -run '^$' -bench BenchmarkShareAcknowledge -benchtime 3000x ./e2e/
func BenchmarkShareAcknowledge(b *testing.B) {
	for _, c := range []struct{ n, size int }{{1, 1024}, {100, 1024}, {100, 1}} {
		n := c.n
		b.Run(fmt.Sprintf("records=%d/bytes=%d", n, c.size), func(b *testing.B) {
			s := newStack(b, app.Options{})
			s.createTopic(b, "bench", 1, nil)
			ctx := context.Background()
			req := &sharelogv1.ProduceRequest{Topic: "bench", Partition: proto.Int32(0)}
			for range 1000 {
				req.Records = append(req.Records, &sharelogv1.Record{Value: make([]byte, c.size)})
			}
			sg := sharelogv1.NewShareGroupServiceClient(s.conn)
			_, err := sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
				Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
			require.NoError(b, err)
			epoch := int32(0)
			var acked time.Duration
			left := 0 // records produced, not yet fetched
			for b.Loop() {
				if left < n {
					_, err := s.log.Produce(ctx, req)
					require.NoError(b, err)
					left += len(req.Records)
				}
				left -= n
				freq := &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: epoch,
					MaxRecords: proto.Int32(int32(n)), MaxWaitMs: 1000}
				if epoch == 0 {
					freq.Topics = []*sharelogv1.ShareFetchTopic{{Topic: "bench", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0}}}}
				}
				var a []*sharelogv1.AcquiredRecords
				for len(a) == 0 { // the opening fetch may answer before records are acquired
					fr, err := sg.ShareFetch(ctx, freq)
					if err != nil {
						b.Fatal(err)
					}
					epoch++
					freq.ShareSessionEpoch, freq.Topics = epoch, nil
					for _, tr := range fr.GetResponses() {
						for _, pr := range tr.GetPartitions() {
							a = append(a, pr.GetAcquiredRecords()...)
						}
					}
				}
				batch := &sharelogv1.AcknowledgementBatch{FirstOffset: a[0].GetFirstOffset(), LastOffset: a[len(a)-1].GetLastOffset(),
					AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}}
				t := time.Now()
				ar, err := sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: epoch,
					Topics: []*sharelogv1.ShareFetchTopic{{Topic: "bench", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0, AcknowledgementBatches: []*sharelogv1.AcknowledgementBatch{batch}}}}}})
				acked += time.Since(t)
				if err != nil || ar.GetResponses()[0].GetPartitions()[0].GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
					b.Fatal(err, ar)
				}
				epoch++
			}
			b.ReportMetric(float64(acked.Nanoseconds())/float64(b.N), "ack-ns/op")
		})
	}
}
