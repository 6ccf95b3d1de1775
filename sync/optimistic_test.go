package sync_test

import (
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestOptimisticBudgetShared: with an overshoot budget,
// lua/sync.lua's share grants at most ceil(pool/holders), holders being
// the instances with a live allowance record, and never less than what the
// asking instance still holds. The first instance on a key is alone and
// gets the whole pool (B + fB); a second one then finds no room, is granted
// 0, and its record is deleted, so it never counts as a holder. The first
// one's renewals (every allowanceLife/5 while it holds allowance) again
// find one holder and take the whole pool. While the first instance keeps
// using the key, even lightly, the second gets only what refilled since
// the first one's last message: under 1000/h, nothing, and it is denied
// every request while the bucket holds about 980 tokens.
func TestOptimisticBudgetShared(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	ctx := context.Background()
	clk := clock.New(time.Now())
	opts := []hlsync.Option{hlsync.WithPrefix(p), hlsync.WithMode(hlsync.Optimistic), hlsync.WithOvershootBudget(0.1)}
	a := clocked(t, rdb, clk, append(opts, hlsync.WithInstanceID("a"))...)
	b := clocked(t, rdb, clk, append(opts, hlsync.WithInstanceID("b"))...)
	// A slow refill, so that Redis time passing during the test (it reads
	// its own clock) refills well under a token: the bucket holds about
	// 1,000 tokens throughout.
	limit := hybridlimit.PerHour(1000)
	var admittedA, admittedB int
	for step := 0; step < 20; step++ {
		r, err := b.Allow(ctx, "k", limit) // b uses the key lightly: one request a step
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admittedB++
		}
		if r, err = a.Allow(ctx, "k", limit); err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admittedA++
		}
		clk.Advance(300 * time.Millisecond)
		_ = a.Sync(ctx)
		_ = b.Sync(ctx)
	}
	t.Logf("a admitted %d of 20 (holds %d), b admitted %d of 20 (holds %d)", admittedA, a.Stats().Outstanding, admittedB, b.Stats().Outstanding)
	if admittedA == 0 {
		t.Errorf("a was denied all 20 requests while the bucket holds %d tokens (limit %v)", remaining(t, rdb, p, "k", limit, 64), limit)
	}
}

// TestOptimisticBudgetLowLimit: Optimistic with an overshoot budget, one
// instance, 100 per minute: under the default low-limit rule the key
// leases nothing ahead, so compose's take-back kept twice a lease of 0:
// every compose dropped the whole allowance and sent nothing, and the
// next decision was denied locally while the bucket held 99 tokens (9 of
// 10 denied).
func TestOptimisticBudgetLowLimit(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	ctx := context.Background()
	clk := clock.New(time.Now())
	l := clocked(t, rdb, clk, hlsync.WithPrefix(p), hlsync.WithInstanceID("a"),
		hlsync.WithMode(hlsync.Optimistic), hlsync.WithOvershootBudget(0.1))
	limit := hybridlimit.PerMinute(100)
	denied := 0
	for i := range 10 {
		r, err := l.Allow(ctx, "k", limit)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			denied++
			t.Logf("decision %d denied: %+v", i, r)
		}
		for range 2 { // two rounds a decision: the second has nothing to report
			clk.Advance(300 * time.Millisecond)
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if denied > 0 {
		t.Errorf("%d of 10 decisions, one every 600ms, denied on a key of 100/min that holds about %d tokens", denied, remaining(t, rdb, p, "k", limit, 64))
	}
}

// TestOptimisticBudgetIdleKey: the same take-back on a key well above
// the low-limit rule (1000/s): quiet past the idle hold (10s), its lease
// was 0, the rounds dropped its allowance and stopped renewing it, and its
// next decision was denied while the bucket was full.
func TestOptimisticBudgetIdleKey(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	ctx := context.Background()
	clk := clock.New(time.Now())
	l := clocked(t, rdb, clk, hlsync.WithPrefix(p), hlsync.WithInstanceID("a"),
		hlsync.WithMode(hlsync.Optimistic), hlsync.WithOvershootBudget(0.1))
	limit := hybridlimit.PerSecond(1000)
	if r, err := l.Allow(ctx, "k", limit); err != nil || !r.Allowed {
		t.Fatalf("Allow = %+v, %v", r, err)
	}
	for range 48 { // 12s of rounds
		clk.Advance(250 * time.Millisecond)
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r, err := l.Allow(ctx, "k", limit)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Allowed {
		t.Errorf("after 12s quiet, Allow on a full 1000/s key = %+v", r)
	}
}
