package sync_test

import (
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestRestartBehindClockOptimistic: sequence numbers start at the clock in
// microseconds "so a restarted instance with the same id numbers above its
// past". If the clock read at the restart is behind the one the previous
// incarnation started from (a wall-clock step back, a pod rescheduled on a
// node whose clock lags), every message of the new incarnation has a
// sequence number below its ledger's and is ignored by lua/sync.lua, which
// still replies. In Optimistic mode without a budget that reply hands out
// what the bucket holds, and what was spent is never debited: the same 90
// tokens are admitted again after every round.
func TestRestartBehindClockOptimistic(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	ctx := context.Background()
	limit := frozen(100)
	opts := []hlsync.Option{hlsync.WithPrefix(p), hlsync.WithInstanceID("pod-0"), hlsync.WithMode(hlsync.Optimistic)}

	clk1 := clock.New(time.Now())
	first := clocked(t, rdb, clk1, opts...)
	var admitted int64
	for range 10 {
		r, err := first.Allow(ctx, "k", limit)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admitted++
		}
	}
	if err := first.Close(ctx); err != nil { // reports the 10
		t.Fatal(err)
	}
	if left := remaining(t, rdb, p, "k", limit, 64); left != 100-admitted {
		t.Fatalf("after the first incarnation Redis holds %d, want %d", left, 100-admitted)
	}

	// The same pod restarts; its clock reads a minute behind.
	clk2 := clock.New(time.Now())
	clk2.Advance(-time.Minute)
	second := clocked(t, rdb, clk2, opts...)
	for round := 0; round < 5; round++ {
		for {
			r, err := second.Allow(ctx, "k", limit)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Allowed {
				break
			}
			admitted++
		}
		clk2.Advance(time.Second)
		if err := second.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	left := remaining(t, rdb, p, "k", limit, 64)
	t.Logf("admitted %d in all; Redis still holds %d", admitted, left)
	// Optimistic without a budget may overshoot about N*B with N instances;
	// one instance at a time here, so 2 bursts is generous.
	if admitted > 2*limit.Burst {
		t.Errorf("admitted %d against a frozen budget of %d: the restarted instance's reports are ignored", admitted, limit.Burst)
	}
}

// TestRestartBehindClockReserve: the same restart in Reserve
// mode. The ignored messages grant nothing, so the restarted instance is
// denied every token of a key that holds 90, for as long as its old ledger
// lives (other instances writing the key keep the hash alive).
func TestRestartBehindClockReserve(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	ctx := context.Background()
	limit := frozen(100)
	opts := []hlsync.Option{hlsync.WithPrefix(p), hlsync.WithInstanceID("pod-0")}
	clk1 := clock.New(time.Now())
	first := clocked(t, rdb, clk1, opts...)
	for range 10 {
		if r, err := first.Allow(ctx, "k", limit); err != nil || !r.Allowed {
			t.Fatalf("Allow = %+v, %v", r, err)
		}
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	clk2 := clock.New(time.Now())
	clk2.Advance(-time.Minute)
	second := clocked(t, rdb, clk2, opts...)
	var allowed int
	for range 20 {
		r, err := second.Allow(ctx, "k", limit)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			allowed++
		}
		clk2.Advance(time.Second)
		_ = second.Sync(ctx)
	}
	if left := remaining(t, rdb, p, "k", limit, 64); allowed == 0 {
		t.Errorf("restarted instance admitted 0 of 20 while Redis holds %d tokens", left)
	}
}
