package kafkawire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// Connection timeouts (docs/kafka.md "Limits").
const (
	// DefaultIdleTimeout is the default --kafka-idle-timeout, Kafka's
	// connections.max.idle.ms.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultRequestTimeout is the default --kafka-request-timeout.
	DefaultRequestTimeout = 30 * time.Second
)

// errIdle and errSlowRequest close a connection (logged as its reason).
var (
	errIdle        = errors.New("idle for longer than --kafka-idle-timeout")
	errSlowRequest = errors.New("a request's bytes did not all arrive within --kafka-request-timeout")
)

// activity is what the idle timeout of a connection is measured from: the
// last request read or response written, and whether a request is being
// handled (a long-polling Fetch is not idle).
type activity struct {
	last atomic.Int64 // unix nanoseconds
	busy atomic.Bool
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// nextRequest reads the next request frame from r, the buffered reader
// over nc:
//   - waiting for its first byte, the connection is idle once no request
//     was read nor response written for idle, and none is being handled:
//     then errIdle;
//   - from its first byte, all its bytes must arrive within reqTimeout,
//     else errSlowRequest (a client sending a byte now and then would
//     otherwise hold the connection, and its buffer, for ever).
//
// A deadline never cuts into a frame: the idle wait only peeks, so the
// read resumes cleanly after a deadline that is extended.
func nextRequest(nc net.Conn, r *bufio.Reader, in *bytes.Buffer, max int32, idle, reqTimeout time.Duration, act *activity) ([]byte, error) {
	for {
		deadline := time.Unix(0, act.last.Load()).Add(idle)
		if act.busy.Load() {
			deadline = time.Now().Add(idle)
		}
		if err := nc.SetReadDeadline(deadline); err != nil {
			return nil, err
		}
		_, err := r.Peek(1)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, err
		}
		if !act.busy.Load() && time.Since(time.Unix(0, act.last.Load())) >= idle {
			return nil, errIdle
		}
		// A response was written or a request is still being handled
		// meanwhile: wait again, from then.
	}
	if err := nc.SetReadDeadline(time.Now().Add(reqTimeout)); err != nil {
		return nil, err
	}
	frame, err := readFrame(r, in, max)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, fmt.Errorf("%w (%s)", errSlowRequest, reqTimeout)
	}
	if err != nil {
		return nil, err
	}
	act.touch()
	return frame, nil
}
