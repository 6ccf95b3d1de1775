package sync_test

import (
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// waiting returns a limiter with no loop, on a standalone server, whose
// decisions wait up to 2 s for a fetch; closed when the test ends.
func waiting(t *testing.T) *hlsync.Limiter {
	t.Helper()
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithInstanceID("a"), hlsync.WithMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// TestPeekAfterLimitChange: a key emptied under 1 per hour is raised to
// burst 5. AllowN under the raised limit drops the old limit's denial,
// but Peek under it read that denial still: not allowed, an hour to wait,
// nothing left, while Redis held 4.
func TestPeekAfterLimitChange(t *testing.T) {
	redistest.NoLeaks(t)
	ctx := context.Background()
	l := waiting(t)
	old := hybridlimit.Limit{Rate: 1, Period: time.Hour, Burst: 1}
	raised := old.WithBurst(5)
	if r, err := l.Allow(ctx, "k", old); err != nil || !r.Allowed {
		t.Fatalf("Allow = %+v, %v", r, err)
	}
	if r, err := l.Allow(ctx, "k", old); err != nil || r.Allowed {
		t.Fatalf("second Allow = %+v, %v; want denied", r, err)
	}
	pk, err := l.Peek(ctx, "k", raised)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Allow(ctx, "k", raised)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Peek(raised) = %+v; Allow(raised) = %+v", pk, r)
	if r.Allowed && (!pk.Allowed || pk.Remaining == 0) {
		t.Errorf("Peek under the raised limit said allowed %v, %d left, retry %v; Allow then admitted (%d left)", pk.Allowed, pk.Remaining, pk.RetryAfter, r.Remaining)
	}
}

// TestFlappingLimitKeepsDenial: a key exhausted in Redis is asked under
// two limits in turn (say, a per-plan limit read from two places). Each
// change of limit cleared the entry's denial, so every denied decision
// waited for a fetch, a round trip to Redis (40 of 40), where the same
// key under one limit is denied locally until Redis's retry time.
func TestFlappingLimitKeepsDenial(t *testing.T) {
	redistest.NoLeaks(t)
	ctx := context.Background()
	l := waiting(t)
	a := hybridlimit.Limit{Rate: 1, Period: time.Hour, Burst: 2}
	b := a.WithBurst(3)
	for range 3 {
		if _, err := l.Allow(ctx, "k", b); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := l.Allow(ctx, "k", b); err != nil || r.Allowed {
		t.Fatalf("Allow on an exhausted key = %+v, %v", r, err)
	}
	before := l.Stats()
	for i := range 40 {
		lim := a
		if i%2 == 1 {
			lim = b
		}
		if r, err := l.Allow(ctx, "k", lim); err != nil || r.Allowed {
			t.Fatalf("Allow = %+v, %v", r, err)
		}
	}
	after := l.Stats()
	t.Logf("40 denials: waits %d, messages %d", after.Waits-before.Waits, after.Messages-before.Messages)
	if w := after.Waits - before.Waits; w > 2 {
		t.Errorf("40 denials of a key Redis said is empty for an hour waited for %d fetches (%d messages)", w, after.Messages-before.Messages)
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
	clk := newFakeClock()
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
			clk.now.Add(int64(300 * time.Millisecond))
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
	clk := newFakeClock()
	l := clocked(t, rdb, clk, hlsync.WithPrefix(p), hlsync.WithInstanceID("a"),
		hlsync.WithMode(hlsync.Optimistic), hlsync.WithOvershootBudget(0.1))
	limit := hybridlimit.PerSecond(1000)
	if r, err := l.Allow(ctx, "k", limit); err != nil || !r.Allowed {
		t.Fatalf("Allow = %+v, %v", r, err)
	}
	for range 48 { // 12s of rounds
		clk.now.Add(int64(250 * time.Millisecond))
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
