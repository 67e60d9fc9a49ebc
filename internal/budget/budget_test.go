package budget

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sharelog/sharelog/internal/principal"
)

// Reservations that wait must be gone once each test is over.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// call is the context of one call of client name, with its Holder.
func call(name string, enc Encoding) (context.Context, *Holder) {
	h := NewHolder(enc)
	return WithHolder(principal.WithName(context.Background(), name), h), h
}

func TestReserveSharesAndWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Config{Total: 4 << 20, PerPrincipal: 1 << 20, MaxFetch: 3 << 20})

		// A client gets at most its share, however much it asks for.
		ctx, h := call("User:a", Binary)
		g, err := b.Reserve(ctx, 8<<20, time.Second)
		require.NoError(t, err)
		assert.Equal(t, 1<<20, g.Data, "capped at the share")
		assert.EqualValues(t, 1<<20, b.InFlight())

		// Its next call waits for it, then gets nothing.
		ctx2, h2 := call("User:a", Binary)
		start := time.Now()
		g2, err := b.Reserve(ctx2, 1<<20, time.Second)
		require.NoError(t, err)
		assert.Zero(t, g2.Data)
		assert.Equal(t, time.Second, time.Since(start), "it waited its wait")
		assert.EqualValues(t, 1, b.Refused())

		// Another client is not held up.
		ctxB, hB := call("User:b", Binary)
		gb, err := b.Reserve(ctxB, 1<<20, time.Second)
		require.NoError(t, err)
		assert.Equal(t, 1<<20, gb.Data)
		assert.Zero(t, time.Since(start)-time.Second, "at once")
		hB.Release()

		// A waiting call gets the bytes as soon as the response is written.
		got := make(chan int, 1)
		go func() {
			g, err := b.Reserve(ctx2, 512<<10, time.Minute)
			assert.NoError(t, err)
			got <- g.Data
		}()
		synctest.Wait()
		assert.EqualValues(t, 1, b.Waiting())
		h.Release()
		assert.Equal(t, 512<<10, <-got)
		h2.Release()
		assert.Zero(t, b.InFlight(), "every holder released")
		assert.Zero(t, b.Waiting())
	})
}

func TestSettleAndEncoding(t *testing.T) {
	b := New(Config{Total: 64 << 20, PerPrincipal: 64 << 20, MaxFetch: 30 << 20})
	ctx, h := call("ip:127.0.0.1", JSON)
	g, err := b.Reserve(ctx, 48<<20, time.Second)
	require.NoError(t, err)
	assert.Equal(t, 30<<20, g.Data, "capped at MaxFetch")
	assert.EqualValues(t, 40<<20, b.InFlight(), "JSON counts 4/3 of the data")
	g.Settle(3000, 10)
	assert.EqualValues(t, 4000+10*JSON.PerRecord, b.InFlight(), "settled to what the response carries")
	g.Settle(40<<20, 1) // a first record over the grant
	assert.EqualValues(t, (40<<20)*4/3+JSON.PerRecord, b.InFlight())
	h.Release()
	h.Release()
	assert.Zero(t, b.InFlight())

	// A reservation after the call ended is given back at once.
	g, err = b.Reserve(ctx, 1000, time.Second)
	require.NoError(t, err)
	assert.Equal(t, 1000, g.Data)
	assert.Zero(t, b.InFlight())

	// Without a Holder, or a budget, nothing is budgeted.
	g, err = b.Reserve(context.Background(), 1<<30, 0)
	require.NoError(t, err)
	assert.Equal(t, 30<<20, g.Data)
	var none *Bytes
	g, err = none.Reserve(ctx, 1<<30, 0)
	require.NoError(t, err)
	assert.Equal(t, 1<<30, g.Data)
	assert.Zero(t, b.InFlight())
}

func TestReserveCancelled(t *testing.T) {
	b := New(Config{Total: 1 << 20, PerPrincipal: 1 << 20})
	ctx, h := call("", Binary)
	defer h.Release()
	_, err := b.Reserve(ctx, 1<<20, time.Second)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.Reserve(cctx, 1<<20, time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, b.Waiting())
}

func TestTickets(t *testing.T) {
	b := New(Config{Total: 1 << 20, PerPrincipal: 1 << 20})
	ts := NewTickets()
	id, h := ts.Open(JSON)
	require.Same(t, h, ts.Holder(id))
	g, err := b.Reserve(WithHolder(context.Background(), ts.Holder(id)), 3000, 0)
	require.NoError(t, err)
	assert.Equal(t, 3000, g.Data)
	assert.EqualValues(t, 4000, b.InFlight())
	ts.Close(id)
	assert.Nil(t, ts.Holder(id))
	assert.Zero(t, b.InFlight())
	assert.Nil(t, ts.Holder("nope"))
}
