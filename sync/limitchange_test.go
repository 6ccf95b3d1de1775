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

// TestRaisedLimitHonoured: a key exhausted under "1 per hour" is
// given "1 per hour, burst 5". Redis's bucket (the same TAT, a larger
// tolerance) holds 4 tokens at once, and a second instance is admitted;
// the instance that saw the old limit kept denying for the old limit's
// retry time (an hour) from its stale denyUntil.
func TestRaisedLimitHonoured(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	ctx := context.Background()
	mk := func(id string) *hlsync.Limiter {
		l, err := hlsync.New(rdb, hlsync.WithPrefix(p), hlsync.WithInstanceID(id), hlsync.WithMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(ctx) })
		return l
	}
	a, b := mk("a"), mk("b")
	old := hybridlimit.Limit{Rate: 1, Period: time.Hour, Burst: 1}
	raised := old.WithBurst(5)
	if r, err := a.Allow(ctx, "k", old); err != nil || !r.Allowed {
		t.Fatalf("first Allow = %+v, %v", r, err)
	}
	if r, err := a.Allow(ctx, "k", old); err != nil || r.Allowed {
		t.Fatalf("second Allow under the old limit = %+v, %v; want denied", r, err)
	}
	// Another instance, new to the key, is admitted under the raised limit:
	// Redis holds tokens for it.
	if r, err := b.Allow(ctx, "k", raised); err != nil || !r.Allowed {
		t.Fatalf("b.Allow under the raised limit = %+v, %v; want allowed", r, err)
	}
	r, err := a.Allow(ctx, "k", raised)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Allowed {
		t.Errorf("a.Allow under the raised limit = allowed %v, RetryAfter %v (source %v); Redis holds 3 more tokens", r.Allowed, r.RetryAfter, r.Source)
	}
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
