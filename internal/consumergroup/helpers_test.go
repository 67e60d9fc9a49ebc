package consumergroup

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

func open(t *testing.T, o Options) *Coordinator {
	t.Helper()
	if o.Store == nil {
		o.Store = groupoffsets.NewMem()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MinSessionTimeout == 0 {
		o.MinSessionTimeout = time.Millisecond
	}
	c, err := Open(o)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

type joined struct {
	resp JoinResponse
	err  error
}

// joinAsync sends a JoinGroup whose answer arrives on the channel.
func joinAsync(c *Coordinator, req JoinRequest) <-chan joined {
	ch := make(chan joined, 1)
	go func() {
		r, err := c.Join(context.Background(), req)
		ch <- joined{r, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan joined, within time.Duration) joined {
	t.Helper()
	select {
	case j := <-ch:
		return j
	case <-time.After(within):
		t.Fatalf("no JoinGroup answer within %v", within)
	}
	return joined{}
}

func pending(t *testing.T, ch <-chan joined, d time.Duration) {
	t.Helper()
	select {
	case j := <-ch:
		t.Fatalf("JoinGroup answered early: %+v %v", j.resp, j.err)
	case <-time.After(d):
	}
}

func joinReq(member string, protocols ...string) JoinRequest {
	if len(protocols) == 0 {
		protocols = []string{"range"}
	}
	r := JoinRequest{Group: "g", MemberID: member, ClientID: "c", ProtocolType: "consumer",
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second, RequireKnownMemberID: true}
	for _, p := range protocols {
		r.Protocols = append(r.Protocols, Protocol{Name: p, Metadata: []byte(member + "/" + p)})
	}
	return r
}

// newMemberID runs the MEMBER_ID_REQUIRED step and returns the id.
func memberID(t *testing.T, c *Coordinator, req JoinRequest) string {
	t.Helper()
	req.MemberID = ""
	r, err := c.Join(context.Background(), req)
	require.Equal(t, apierr.MemberIDRequired, apierr.ReasonOf(err), "%v", err)
	require.NotEmpty(t, r.MemberID)
	return r.MemberID
}

func reason(err error) apierr.Reason { return apierr.ReasonOf(err) }

func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 5*time.Millisecond, msg)
}
