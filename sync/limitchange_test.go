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

// TestRaisedLimitUnblocks: a key exhausted under 10 an hour on two
// instances is raised to 1000 a second. Redis keeps the tokens the bucket
// held (none) and refills at the new rate: within a second of the change
// both instances admit again, 20 of 20, where the old limit's time until
// full (an hour) denied every decision.
func TestRaisedLimitUnblocks(t *testing.T) {
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
	old, raised := hybridlimit.PerHour(10), hybridlimit.PerSecond(1000)
	for range 10 {
		if r, err := a.Allow(ctx, "k", old); err != nil || !r.Allowed {
			t.Fatalf("Allow under the old limit = %+v, %v", r, err)
		}
	}
	if r, err := b.Allow(ctx, "k", old); err != nil || r.Allowed {
		t.Fatalf("an 11th Allow under 10 an hour = %+v, %v; want denied", r, err)
	}
	changed := time.Now()
	admitted := 0
	for time.Since(changed) < time.Second && admitted < 20 {
		for _, l := range []*hlsync.Limiter{a, b} {
			r, err := l.Allow(ctx, "k", raised)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				admitted++
			} else if r.RetryAfter > time.Second {
				t.Fatalf("%s under the raised limit: denied for %v", l.InstanceID(), r.RetryAfter)
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("raised from 10/h to 1000/s: %d admitted in %v", admitted, time.Since(changed))
	if admitted < 20 {
		t.Errorf("%d of 20 admitted within a second of raising the limit to 1000/s", admitted)
	}
}

// TestLoweredLimitClamps: a key full under 1000 a second, held in part
// by two instances' leases, is lowered to 10 a second. Redis cuts the
// bucket to the new burst and each instance what it holds to its share:
// at once, the two admit no more than the new burst and its refill.
func TestLoweredLimitClamps(t *testing.T) {
	redistest.NoLeaks(t)
	ctx := context.Background()
	ls := newLimiters(t, 2, clients(t, false), hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithMaxWait(2*time.Second))
	high, low := hybridlimit.PerSecond(1000), hybridlimit.PerSecond(10)
	for range 50 { // leases under the high limit
		for _, l := range ls {
			if r, err := l.Allow(ctx, "k", high); err != nil || !r.Allowed {
				t.Fatalf("Allow under 1000/s = %+v, %v", r, err)
			}
		}
	}
	changed := time.Now()
	admitted := 0
	for range 100 {
		for _, l := range ls {
			if r, err := l.Allow(ctx, "k", low); err != nil {
				t.Fatal(err)
			} else if r.Allowed {
				admitted++
			}
		}
	}
	took := time.Since(changed)
	bound := 10 + int(10*took.Seconds()) + 1
	t.Logf("lowered to 10/s: %d admitted in %v (bound %d)", admitted, took, bound)
	if admitted > bound {
		t.Errorf("lowered to 10/s: %d admitted in %v, want at most the new burst and its refill, %d", admitted, took, bound)
	}
}

// TestPeekAfterLimitChange: a key emptied under 1 per hour is raised to
// burst 5, at the same rate: the bucket keeps the none it held, and Peek
// under the new limit says what Allow then decides.
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
	r, err := l.Allow(ctx, "k", raised)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := l.Peek(ctx, "k", raised)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Allow(raised) = %+v; Peek(raised) = %+v", r, pk)
	if r.Allowed || pk.Allowed || pk.Remaining != 0 {
		t.Errorf("raised in burst only, holding none: Allow %v, Peek allowed %v with %d left; want both denied, none left", r.Allowed, pk.Allowed, pk.Remaining)
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
