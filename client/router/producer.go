package router

// Producer: the idempotent producer of docs/produce.md over any
// connection (a Conn, so that each partition's batch goes straight to its
// owner, or a plain *grpc.ClientConn).

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/client/backoff"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// ProducerOptions configures a Producer.
type ProducerOptions struct {
	// RetryTimeout bounds how long one partition's batch is resent while
	// its outcome is unknown or its partition answers a retriable error
	// (default 2 min; the call's context may end it earlier).
	RetryTimeout time.Duration
	// AttemptTimeout bounds one send (default 15 s): an attempt to an
	// instance that stopped answering is abandoned and resent.
	AttemptTimeout time.Duration
	// Backoff is the schedule between resends (client/backoff defaults).
	Backoff backoff.Backoff
}

// Producer produces records idempotently: it takes a producer id from
// InitProducer, numbers each partition's records, sends every partition's
// batch as its own Produce (with partition set, so a Conn routes it to the
// partition's owner) and resends a batch whose outcome is unknown (a
// transport failure, a deadline, UNAVAILABLE, NOT_OWNER,
// OWNER_UNREACHABLE, KAFKA_STORAGE_ERROR, …) until it succeeds: the server
// answers a batch it had appended with the original offsets, so every
// record is stored once. It is safe for concurrent use; the batches of one
// partition are sent one at a time, in call order.
type Producer struct {
	lc sharelogv1.LogServiceClient
	o  ProducerOptions

	mu     sync.Mutex
	id     int64
	epoch  int32
	seqs   map[topicPart]int32 // the next sequence of each partition, for id
	counts map[string]int32    // partition counts (DescribeTopic)
	rr     map[string]uint32   // round-robin position of keyless records
	locks  map[topicPart]*sync.Mutex
}

type topicPart struct {
	topic string
	part  int32
}

// NewProducer returns a Producer over cc with a new producer id.
func NewProducer(ctx context.Context, cc grpc.ClientConnInterface, o ProducerOptions) (*Producer, error) {
	if o.RetryTimeout <= 0 {
		o.RetryTimeout = 2 * time.Minute
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 15 * time.Second
	}
	p := &Producer{lc: sharelogv1.NewLogServiceClient(cc), o: o, counts: map[string]int32{}, rr: map[string]uint32{},
		locks: map[topicPart]*sync.Mutex{}}
	if err := p.init(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// ID is the producer id and epoch in use.
func (p *Producer) ID() (id int64, epoch int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id, p.epoch
}

// init takes a new producer id: every partition's sequence starts again
// at 0. Called with p.mu not held.
func (p *Producer) init(ctx context.Context) error {
	var resp *sharelogv1.InitProducerResponse
	err := p.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = p.lc.InitProducer(ctx, &sharelogv1.InitProducerRequest{})
		return err
	})
	if err != nil {
		return fmt.Errorf("init producer: %w", err)
	}
	p.mu.Lock()
	p.id, p.epoch, p.seqs = resp.GetProducerId(), resp.GetProducerEpoch(), map[topicPart]int32{}
	p.mu.Unlock()
	return nil
}

// ProduceError names the partitions of a Produce that did not append
// their records; the results of the others hold their offsets.
type ProduceError struct {
	Topic string
	// Partitions maps each failed partition to its error (a gRPC status
	// error carrying the reason, or the transport's).
	Partitions map[int32]error
}

func (e *ProduceError) Error() string {
	parts := make([]int32, 0, len(e.Partitions))
	for p := range e.Partitions {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	msgs := make([]string, len(parts))
	for i, p := range parts {
		msgs[i] = fmt.Sprintf("partition %d: %v", p, e.Partitions[p])
	}
	return fmt.Sprintf("produce to %s failed on %d partition(s): %s", e.Topic, len(parts), strings.Join(msgs, "; "))
}

// Produce appends records to topic: all to partition when it is set,
// else keyed records to murmur2(key) % partitions (as the server and
// Kafka's default partitioner) and keyless ones round-robin, chosen here
// so that a resend goes where the first send went. The results are one
// per record, in order: the offset, or (offset -1) the partition's error
// code. The error is a *ProduceError when some partitions failed (the
// results still hold the others' offsets), or the error of the whole call
// (nothing was sent).
func (p *Producer) Produce(ctx context.Context, topic string, partition *int32, records []*sharelogv1.Record) ([]*sharelogv1.ProduceResult, error) {
	if len(records) == 0 {
		return nil, nil
	}
	parts := make([]int32, len(records))
	byPart := map[int32][]int{} // partition → indexes of its records
	var order []int32
	if partition == nil {
		n, err := p.partitions(ctx, topic)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		for i, r := range records {
			if r.Key != nil {
				parts[i] = Partition(r.Key, n)
			} else {
				parts[i] = int32(p.rr[topic] % uint32(n))
				p.rr[topic]++
			}
		}
		p.mu.Unlock()
	} else {
		for i := range parts {
			parts[i] = *partition
		}
	}
	for i, pt := range parts {
		if _, ok := byPart[pt]; !ok {
			order = append(order, pt)
		}
		byPart[pt] = append(byPart[pt], i)
	}
	results := make([]*sharelogv1.ProduceResult, len(records))
	var mu sync.Mutex
	failed := map[int32]error{}
	var wg sync.WaitGroup
	for _, pt := range order {
		idx := byPart[pt]
		wg.Go(func() {
			batch := make([]*sharelogv1.Record, len(idx))
			for k, i := range idx {
				batch[k] = records[i]
			}
			base, err := p.send(ctx, topic, pt, batch)
			mu.Lock()
			defer mu.Unlock()
			for k, i := range idx {
				r := &sharelogv1.ProduceResult{Partition: pt, Offset: base + int64(k)}
				if err != nil {
					r.Offset = -1
					r.ErrorCode = sharelogv1.ErrorCode(apierr.Reason(reasonOf(err)).KafkaCode())
					if r.ErrorCode == sharelogv1.ErrorCode_ERROR_CODE_NONE {
						r.ErrorCode = sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_SERVER_ERROR
					}
					r.ErrorMessage = err.Error()
				}
				results[i] = r
			}
			if err != nil {
				failed[pt] = err
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		return results, &ProduceError{Topic: topic, Partitions: failed}
	}
	return results, nil
}

// partitions is topic's partition count, read once.
func (p *Producer) partitions(ctx context.Context, topic string) (int32, error) {
	p.mu.Lock()
	n, ok := p.counts[topic]
	p.mu.Unlock()
	if ok {
		return n, nil
	}
	var t *sharelogv1.Topic
	err := p.retry(ctx, func(ctx context.Context) (err error) {
		t, err = p.lc.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: topic})
		return err
	})
	if err != nil {
		return 0, err
	}
	if t.GetPartitionCount() <= 0 {
		return 0, fmt.Errorf("topic %s has %d partitions", topic, t.GetPartitionCount())
	}
	p.mu.Lock()
	p.counts[topic] = t.GetPartitionCount()
	p.mu.Unlock()
	return t.GetPartitionCount(), nil
}

func (p *Producer) lock(tp topicPart) func() {
	p.mu.Lock()
	l := p.locks[tp]
	if l == nil {
		l = &sync.Mutex{}
		p.locks[tp] = l
	}
	p.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// send appends one partition's batch and returns its base offset,
// resending it while its outcome is unknown. A batch given up on with an
// unknown outcome (the retry timeout passed) makes the Producer take a new
// producer id: the old id's next sequence there is then unknown.
func (p *Producer) send(ctx context.Context, topic string, part int32, batch []*sharelogv1.Record) (int64, error) {
	tp := topicPart{topic, part}
	defer p.lock(tp)()
	p.mu.Lock()
	id, epoch, seq := p.id, p.epoch, p.seqs[tp]
	p.mu.Unlock()
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &part, Records: batch,
		ProducerId: id, ProducerEpoch: epoch, BaseSequence: map[int32]int32{part: seq}}
	var base int64
	unknown := false // some attempt may have appended the batch
	err := p.retry(ctx, func(ctx context.Context) error {
		resp, err := p.lc.Produce(ctx, req)
		if err != nil {
			unknown = unknown || outcomeUnknown(err)
			return err
		}
		if len(resp.GetResults()) != len(batch) {
			unknown = true
			return status.Errorf(codes.Internal, "the server answered %d results for %d records", len(resp.GetResults()), len(batch))
		}
		r := resp.GetResults()[0]
		if r.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
			// One partition asked: the server answers its failure as the
			// call's; a per-partition code here is the same outcome.
			reason := apierr.ReasonOfKafkaCode(int16(r.GetErrorCode()))
			return statusOf(reason, r.GetErrorMessage())
		}
		base = r.GetOffset()
		return nil
	})
	if err == nil {
		p.mu.Lock()
		if p.id == id {
			p.seqs[tp] = int32((int64(seq) + int64(len(batch))) % (1 << 31))
		}
		p.mu.Unlock()
		return base, nil
	}
	if unknown {
		if ierr := p.init(context.WithoutCancel(ctx)); ierr != nil {
			err = errors.Join(err, ierr)
		}
	}
	return -1, err
}

// retry calls fn until it succeeds, fails for good, or RetryTimeout (or
// ctx) ends.
func (p *Producer) retry(ctx context.Context, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(p.o.RetryTimeout)
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, p.o.AttemptTimeout)
		err := fn(actx)
		cancel()
		if err == nil || !retriable(err) || ctx.Err() != nil {
			return err
		}
		d := p.o.Backoff.Delay(attempt)
		if time.Now().Add(d).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(d):
		}
	}
}

// retriable: a resend may succeed (docs/errors.md "Retry summary").
func retriable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	case codes.ResourceExhausted:
		r := apierr.Reason(reasonOf(err))
		return r == apierr.ShareSessionLimitReached || r == apierr.ThrottlingQuotaExceeded
	}
	return false
}

// outcomeUnknown: the failed call may have appended (a transport failure,
// a deadline, an owner that did not answer, an internal error). A refusal
// with a reason that says nothing was applied is not unknown.
func outcomeUnknown(err error) bool {
	switch apierr.Reason(reasonOf(err)) {
	case apierr.NotOwner, apierr.KafkaStorageError, apierr.Unavailable, apierr.InvalidRequest,
		apierr.UnknownTopicOrPartition, apierr.TopicAuthorizationFailed, apierr.Unauthenticated,
		apierr.OutOfOrderSequenceNumber, apierr.InvalidProducerEpoch:
		return false
	}
	return true
}

func reasonOf(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// statusOf is a per-partition code as the status error the server answers
// for the same reason (the codes of docs/errors.md).
func statusOf(r apierr.Reason, msg string) error {
	code := codes.Internal
	switch r {
	case apierr.NotOwner, apierr.OwnerUnreachable, apierr.OutcomeUnknown, apierr.KafkaStorageError, apierr.Unavailable:
		code = codes.Unavailable
	case apierr.RequestTimedOut:
		code = codes.DeadlineExceeded
	case apierr.InvalidRequest:
		code = codes.InvalidArgument
	case apierr.UnknownTopicOrPartition:
		code = codes.NotFound
	case apierr.OutOfOrderSequenceNumber, apierr.InvalidProducerEpoch, apierr.ProducerFenced, apierr.PolicyViolation:
		code = codes.FailedPrecondition
	case apierr.TopicAuthorizationFailed:
		code = codes.PermissionDenied
	}
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: string(r), Domain: apierr.Domain})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}
