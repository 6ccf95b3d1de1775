package global

import (
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// TestSlidingWindowRetryAfterClockBack: a call stamped before the start
// of the window the key counts is decided at that window's start (elapsed
// clamped to 0), but the "within this window" RetryAfter is computed from
// left = period, ignoring the (start - now) that must pass before the
// previous window's weight begins to decay. At now+RetryAfter the same
// request is still denied.
func TestSlidingWindowRetryAfterClockBack(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	l, err := New(c, SlidingWindow, WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	ten := hybridlimit.PerSecond(10)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// Window [0,1s): 10 admitted at 0.5s.
	if r, err := l.AllowAt(t.Context(), at(500*time.Millisecond), "k", ten, 10); err != nil || !r.Allowed {
		t.Fatalf("setup 1: %+v %v", r, err)
	}
	// Window [1s,2s): at 1.9s the previous window weighs ceil(10*0.1) = 1.
	if r, err := l.AllowAt(t.Context(), at(1900*time.Millisecond), "k", ten, 1); err != nil || !r.Allowed {
		t.Fatalf("setup 2: %+v %v", r, err)
	}
	// The clock steps back to 0.95s: decided in window [1s,2s) at its start.
	back := at(950 * time.Millisecond)
	r, err := l.AllowAt(t.Context(), back, "k", ten, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed {
		t.Fatalf("at 0.95s: admitted, want denied: %+v", r)
	}
	// Exactly: cur 1 + ceil(10*left/1s) + 1 <= 10 once left <= 0.8s, i.e.
	// at 1.2s, 250ms after 0.95s.
	if want := 250 * time.Millisecond; r.RetryAfter != want {
		t.Errorf("RetryAfter at 0.95s = %v, want %v", r.RetryAfter, want)
	}
	pk, err := l.PeekAt(t.Context(), back.Add(r.RetryAfter), "k", ten, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !pk.Allowed {
		t.Errorf("peek at 0.95s + RetryAfter (%v): still denied (%+v)", r.RetryAfter, pk)
	}
	checkTTLs(t, c, p)
}

// TestDenialUnderNewLimitKeepsState: the TTL a write sets is the time the
// state matters under the limit of that write. A later call under a limit
// for which the state matters longer (a slower refill, a longer window)
// that is denied must keep the state that long: the token bucket writes
// the state converted to the new limit, the window algorithms lengthen
// the TTL. Expired on the old schedule, the key read as a full bucket / an
// empty window, and the next call was admitted although the same state,
// had it been kept, denies it (and the denial's RetryAfter said to wait
// about an hour / a minute).
func TestDenialUnderNewLimitKeepsState(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	ctx := t.Context()

	t.Run("token bucket", func(t *testing.T) {
		l, err := New(c, TokenBucket, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		fast := hybridlimit.Limit{Rate: 1000, Period: time.Second, Burst: 10} // full in 10ms
		slow := hybridlimit.Limit{Rate: 1, Period: time.Hour, Burst: 10}      // one token an hour
		// The caller's clock is the real one, so the TTLs Redis counts
		// down match it; the first two calls share an instant.
		now := time.Now()
		if r, err := l.AllowAt(ctx, now, "tb", fast, 10); err != nil || !r.Allowed {
			t.Fatalf("setup: %+v %v", r, err)
		}
		r, err := l.AllowAt(ctx, now, "tb", slow, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			t.Fatalf("slow limit on an empty bucket admitted: %+v", r)
		}
		t.Logf("denied under the slow limit: RetryAfter %v", r.RetryAfter)
		time.Sleep(200 * time.Millisecond)
		admitted := 0
		for range 10 {
			r, err := l.AllowAt(ctx, time.Now(), "tb", slow, 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				admitted++
			}
		}
		if admitted > 0 {
			t.Errorf("200ms after a denial that said wait %v, %d of 10 admitted at 1 per hour (want 0: the bucket was empty and refills 0.00006 tokens in 200ms)", r.RetryAfter, admitted)
		}
	})

	t.Run("sliding log", func(t *testing.T) {
		l, err := New(c, SlidingLog, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		short := hybridlimit.Limit{Rate: 5, Period: 100 * time.Millisecond, Burst: 5}
		long := hybridlimit.Limit{Rate: 5, Period: time.Minute, Burst: 5}
		if r, err := l.AllowN(ctx, "sl", short, 5); err != nil || !r.Allowed {
			t.Fatalf("setup: %+v %v", r, err)
		}
		r, err := l.AllowN(ctx, "sl", long, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			t.Fatalf("5 of 5 logged this minute, admitted: %+v", r)
		}
		time.Sleep(300 * time.Millisecond)
		r2, err := l.AllowN(ctx, "sl", long, 5)
		if err != nil {
			t.Fatal(err)
		}
		if r2.Allowed {
			t.Errorf("300ms after a denial that said wait %v, 5 more admitted: 10 in the last minute under 5 per minute", r.RetryAfter)
		}
	})

	t.Run("fixed window", func(t *testing.T) {
		l, err := New(c, FixedWindow, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		short := hybridlimit.Limit{Rate: 5, Period: 100 * time.Millisecond, Burst: 5}
		long := hybridlimit.Limit{Rate: 5, Period: time.Second, Burst: 5}
		// The caller's clock is the real one; start early in a second so that
		// the 100ms window and the 1s window start at the same instant.
		for time.Now().UnixMicro()%1_000_000 > 20_000 {
			time.Sleep(time.Millisecond)
		}
		if r, err := l.AllowAt(ctx, time.Now(), "fw", short, 5); err != nil || !r.Allowed {
			t.Fatalf("setup: %+v %v", r, err)
		}
		r, err := l.AllowAt(ctx, time.Now(), "fw", long, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			t.Fatalf("5 of 5 in this second, admitted: %+v", r)
		}
		time.Sleep(300 * time.Millisecond)
		r2, err := l.AllowAt(ctx, time.Now(), "fw", long, 5)
		if err != nil {
			t.Fatal(err)
		}
		if r2.Allowed {
			t.Errorf("in the same 1s window, after a denial that said wait %v, 5 more admitted: 10 in one window of quota 5", r.RetryAfter)
		}
	})
	checkTTLs(t, c, p)
}

// TestFarFutureTimeExact decides at the latest time the At methods
// accept and refuses the next: they took any time below 2^53 us, but
// gcra.lua adds up to a refill time to it, and past 2^53 a Lua number
// steps by 2 us. At 2^53-2 us a fresh key (a full bucket of one token)
// denied a cost of 1, with Remaining 1 in the same reply.
func TestFarFutureTimeExact(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	lim := hybridlimit.Limit{Rate: 1, Period: 1001 * us, Burst: 1}
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog} {
		l, err := New(c, alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		last := time.UnixMicro(scripts.MaxNow - 1)
		r, err := l.AllowAt(t.Context(), last, "far", lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed || r.Remaining != 0 || r.ResetAfter <= 0 || r.ResetAfter > 2002*us {
			t.Errorf("%v: AllowAt(scripts.MaxNow-1us) on a fresh key = %+v, want admitted, 0 left", alg, r)
		}
		for _, at := range []time.Time{time.UnixMicro(scripts.MaxNow), time.UnixMicro(1<<53 - 2)} {
			if _, err := l.AllowAt(t.Context(), at, "far2", lim, 1); !errors.Is(err, ErrInvalidTime) {
				t.Errorf("%v: AllowAt(%d us) = %v, want ErrInvalidTime", alg, at.UnixMicro(), err)
			}
		}
	}
	cc, err := NewConcurrency(c, WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cc.AcquireAt(t.Context(), time.UnixMicro(scripts.MaxNow), "far", ConcurrencyLimit{MaxInFlight: 1, LeaseTTL: time.Second}); !errors.Is(err, ErrInvalidTime) {
		t.Errorf("Concurrency.AcquireAt(scripts.MaxNow) = %v, want ErrInvalidTime", err)
	}
}
