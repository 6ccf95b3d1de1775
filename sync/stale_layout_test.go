package sync

import (
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// handDriven returns a limiter called id on clk, with no loop (the test
// runs its rounds), a round every 100ms without jitter, and no low-limit
// rule, so that a slow limit leases ahead; closed when the test ends.
func handDriven(t *testing.T, rdb hybridlimit.Redis, clk Clock, prefix, id string, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(rdb, append([]Option{WithPrefix(prefix), WithInstanceID(id), WithClock(clk),
		WithSyncInterval(100*time.Millisecond, 0), WithLowLimitThreshold(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// TestStaleLayoutRejoins cuts an instance off while its key moves twice,
// long enough for the markers of the layout it knew to lapse. They read
// as absent, that is full, and nothing sent it on: it spent its part of
// the old layout as a bucket of its own, on top of the current layout.
// Having heard nothing from Redis for half a marker's life, it must go
// back through the configured layout, whose markers are kept, to the
// current one. Both instances together then admit the budget, no more.
func TestStaleLayoutRejoins(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	clk := clock.New(time.Now())
	a, b := handDriven(t, rdb, clk, prefix, "a"), handDriven(t, rdb, clk, prefix, "b")
	const budget = 3000
	limit := hybridlimit.Limit{Rate: budget, Period: time.Hour, Burst: budget} // about a token a second refills
	start := time.Now()
	var admitted int64
	spend := func(l *Limiter, cost int64) bool {
		t.Helper()
		r, err := l.AllowN(ctx, "hot", limit, cost)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admitted += cost
		}
		return r.Allowed
	}
	split, merged := layout{3, 1}, layout{1, 2}
	if err := a.reshard(ctx, "hot", limit, layout{1, 0}, split); err != nil {
		t.Fatal(err)
	}
	spend(b, 1) // b follows the markers to the split layout and leases ahead
	if at := b.table.get("hot").layout(); at != split {
		t.Fatalf("b on %v, want %v", at, split)
	}
	if err := a.reshard(ctx, "hot", limit, split, merged); err != nil {
		t.Fatal(err)
	}
	for misses := 0; misses < 3; { // a spends what the merged bucket holds
		if !spend(a, 10) {
			misses++
			clk.Advance(100 * time.Millisecond)
		}
	}
	// b, cut off, hears nothing while the split layout's markers lapse
	// (deleted here, as Redis would once their life is out).
	for j := range split.shards {
		if err := rdb.Del(ctx, a.bucketOf("hot", j, split)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(a.markerLife(limit))
	for range 50 {
		spend(b, 10)
		clk.Advance(100 * time.Millisecond)
		if err := b.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	refill := int64(limit.TokensIn(time.Since(start))) + 1
	if at := b.table.get("hot").layout(); at != merged {
		t.Errorf("b on %v after the gap, want %v", at, merged)
	}
	if admitted > budget+refill {
		t.Errorf("admitted %d, more than the budget %d and its refill %d", admitted, budget, refill)
	}
}
