package global

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/faultproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestConcurrencyAcquireAt(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	cc, err := NewConcurrency(c, WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	limit := ConcurrencyLimit{MaxInFlight: 2, LeaseTTL: 10 * time.Second}
	want := func(ok bool, rem int64, retry, reset time.Duration) hybridlimit.Result {
		return hybridlimit.Result{Limit: limit.Limit(), Allowed: ok, Source: hybridlimit.SourceGlobal, Remaining: rem, RetryAfter: retry, ResetAfter: reset}
	}
	acquire := func(at time.Duration, w hybridlimit.Result) Lease {
		t.Helper()
		lease, got, err := cc.AcquireAt(t.Context(), t0.Add(at), "k", limit)
		if err != nil || got != w {
			t.Errorf("AcquireAt(t0+%v) = %+v, %v; want %+v", at, got, err, w)
		}
		if got.Allowed != (lease.ID != "") || (lease.ID != "" && !lease.Expires.Equal(t0.Add(at+limit.LeaseTTL))) {
			t.Errorf("AcquireAt(t0+%v) lease %+v for %+v", at, lease, got)
		}
		return lease
	}
	release := func(at time.Duration, l Lease, want bool) {
		t.Helper()
		if got, err := cc.ReleaseAt(t.Context(), t0.Add(at), l); err != nil || got != want {
			t.Errorf("ReleaseAt(t0+%v) = %v, %v; want %v", at, got, err, want)
		}
	}

	if got, err := cc.PeekAt(t.Context(), t0, "k", limit); err != nil || got != want(true, 2, 0, 0) {
		t.Errorf("PeekAt(t0) on no leases = %+v, %v", got, err)
	}
	a := acquire(0, want(true, 1, 0, 10*time.Second))
	b := acquire(time.Second, want(true, 0, 0, 10*time.Second))
	acquire(2*time.Second, want(false, 0, 8*time.Second, 9*time.Second))
	if got, err := cc.PeekAt(t.Context(), t0.Add(2*time.Second), "k", limit); err != nil || got != want(false, 0, 8*time.Second, 9*time.Second) {
		t.Errorf("PeekAt(t0+2s) = %+v, %v", got, err)
	}
	release(3*time.Second, a, true)
	release(3*time.Second, a, false) // twice is harmless
	c3 := acquire(3*time.Second, want(true, 0, 0, 10*time.Second))
	// b expires at 11s unreleased: its holder crashed.
	acquire(12*time.Second, want(true, 0, 0, 10*time.Second))
	release(12*time.Second, b, false)
	acquire(12*time.Second, want(false, 0, time.Second, 10*time.Second))
	release(12*time.Second, c3, true)

	// A lowered limit waits for enough leases to expire.
	one := ConcurrencyLimit{MaxInFlight: 1, LeaseTTL: 10 * time.Second}
	acquire(13*time.Second, want(true, 0, 0, 10*time.Second))
	_, got, err := cc.AcquireAt(t.Context(), t0.Add(14*time.Second), "k", one)
	if err != nil || got.Allowed || got.RetryAfter != 9*time.Second {
		t.Errorf("AcquireAt with a lowered limit = %+v, %v; want denied until the second expiry", got, err)
	}
	checkTTLs(t, c, p)
}

func TestConcurrencyBadInput(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	cc, err := NewConcurrency(c, WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []ConcurrencyLimit{
		{}, {MaxInFlight: 1}, {LeaseTTL: time.Second}, {MaxInFlight: -1, LeaseTTL: time.Second},
		{MaxInFlight: 1, LeaseTTL: time.Microsecond}, {MaxInFlight: hybridlimit.MaxQuantity + 1, LeaseTTL: time.Second},
		{MaxInFlight: 1, LeaseTTL: hybridlimit.MaxRefill + 1},
	} {
		if _, r, err := cc.Acquire(t.Context(), "k", l); !errors.Is(err, hybridlimit.ErrInvalidLimit) || r.Allowed {
			t.Errorf("Acquire(%+v) = %+v, %v; want ErrInvalidLimit", l, r, err)
		}
	}
	ok := ConcurrencyLimit{MaxInFlight: 1, LeaseTTL: time.Second}
	if _, _, err := cc.Acquire(t.Context(), "", ok); !errors.Is(err, hybridlimit.ErrInvalidKey) {
		t.Errorf("Acquire with an empty key: %v", err)
	}
	if _, _, err := cc.AcquireAt(t.Context(), time.Time{}, "k", ok); !errors.Is(err, ErrInvalidTime) {
		t.Errorf("AcquireAt the zero time: %v", err)
	}
	for _, l := range []Lease{{}, {Key: "k"}, {ID: "x"}} {
		if _, err := cc.Release(t.Context(), l); !errors.Is(err, ErrInvalidLease) {
			t.Errorf("Release(%+v): %v, want ErrInvalidLease", l, err)
		}
	}
}

// TestConcurrencyExpiry proves on the Redis clock that a lease nobody
// releases frees its slot after its TTL.
func TestConcurrencyExpiry(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	cc, err := NewConcurrency(c, WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	limit := ConcurrencyLimit{MaxInFlight: 1, LeaseTTL: 50 * time.Millisecond}
	if _, r, err := cc.Acquire(t.Context(), "k", limit); err != nil || !r.Allowed {
		t.Fatalf("Acquire = %+v, %v", r, err)
	}
	_, r, err := cc.Acquire(t.Context(), "k", limit)
	if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > limit.LeaseTTL {
		t.Fatalf("second Acquire = %+v, %v; want denied with RetryAfter in (0, %v]", r, err, limit.LeaseTTL)
	}
	time.Sleep(r.RetryAfter + 5*time.Millisecond)
	lease, r, err := cc.Acquire(t.Context(), "k", limit)
	if err != nil || !r.Allowed {
		t.Fatalf("Acquire after the first lease expired = %+v, %v", r, err)
	}
	checkTTLs(t, c, p)
	if ok, err := cc.Release(t.Context(), lease); err != nil || !ok {
		t.Errorf("Release = %v, %v", ok, err)
	}
}

// TestConcurrencyHammer: many goroutines over many clients hold what they
// acquire, so exactly MaxInFlight leases are granted; then they acquire and
// release in a loop, and at no time hold more than MaxInFlight.
func TestConcurrencyHammer(t *testing.T) {
	redistest.NoLeaks(t)
	limit := ConcurrencyLimit{MaxInFlight: 50, LeaseTTL: time.Hour}
	for _, top := range topologies {
		t.Run(top.Name, func(t *testing.T) {
			p := redistest.Prefix(t)
			var (
				next, granted, held, peak atomic.Int64
				wg                        sync.WaitGroup
				mu                        sync.Mutex
				leases                    []Lease
			)
			limiters := make([]*Concurrency, hammerClients)
			for i := range limiters {
				cc, err := NewConcurrency(top.Dial(t), WithPrefix(p))
				if err != nil {
					t.Fatal(err)
				}
				limiters[i] = cc
			}
			const attempts = 1000
			for _, cc := range limiters {
				for range hammerGoroutines {
					wg.Go(func() {
						for next.Add(1) <= attempts {
							lease, r, err := cc.Acquire(t.Context(), "hold", limit)
							if err != nil {
								t.Errorf("Acquire: %v", err)
								return
							}
							if r.Allowed {
								granted.Add(1)
								mu.Lock()
								leases = append(leases, lease)
								mu.Unlock()
							}
						}
					})
				}
			}
			wg.Wait()
			if got := granted.Load(); got != limit.MaxInFlight {
				t.Errorf("%d attempts granted %d leases, want exactly %d", attempts, got, limit.MaxInFlight)
			}
			checkTTLs(t, top.Dial(t), p)
			for _, l := range leases {
				if ok, err := limiters[0].Release(t.Context(), l); err != nil || !ok {
					t.Errorf("Release = %v, %v", ok, err)
				}
			}

			next.Store(0)
			granted.Store(0)
			for _, cc := range limiters {
				for range hammerGoroutines {
					wg.Go(func() {
						for next.Add(1) <= 2*attempts {
							lease, r, err := cc.Acquire(t.Context(), "loop", limit)
							if err != nil {
								t.Errorf("Acquire: %v", err)
								return
							}
							if !r.Allowed {
								continue
							}
							granted.Add(1)
							// Count before the next lease can be granted
							// and uncount before this one is released: the
							// count can only lag Redis, never lead it.
							n := held.Add(1)
							for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
							}
							held.Add(-1)
							if ok, err := cc.Release(t.Context(), lease); err != nil || !ok {
								t.Errorf("Release = %v, %v", ok, err)
							}
						}
					})
				}
			}
			wg.Wait()
			if peak.Load() > limit.MaxInFlight || granted.Load() == 0 {
				t.Errorf("held at most %d leases (of %d granted), want at most %d", peak.Load(), granted.Load(), limit.MaxInFlight)
			}
			if noTTL, _ := redistest.KeysWithoutTTL(t, top.Dial(t), p); len(noTTL) > 0 {
				t.Errorf("keys without TTL: %q", noTTL)
			}
		})
	}
}

// TestConcurrencyAcquireRetried loses the reply to an Acquire, which
// go-redis then sends again with the same lease id: the retry must grant
// the lease the first run took, not count it against itself and deny,
// which left the only slot held by nobody for the lease's whole TTL.
func TestConcurrencyAcquireRetried(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	px := faultproxy.Start(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: px.Addr()}) // retries a command whose reply is lost
	t.Cleanup(func() { _ = c.Close() })
	p := redistest.Prefix(t)
	cc, err := NewConcurrency(c, WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	lim := ConcurrencyLimit{MaxInFlight: 1, LeaseTTL: time.Minute}
	l, r, err := cc.Acquire(ctx, "k", lim) // loads the script
	if err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if ok, err := cc.Release(ctx, l); !ok || err != nil {
		t.Fatal(ok, err)
	}
	px.TargetCommands("EVALSHA", "EVAL")
	px.DropReplies(1)
	l, r, err = cc.Acquire(ctx, "k", lim)
	if err != nil || !r.Allowed {
		t.Fatalf("Acquire whose first reply was lost = %+v, %v; want the lease", r, err)
	}
	if ok, err := cc.Release(ctx, l); !ok || err != nil {
		t.Fatalf("Release = %v, %v; want the lease freed", ok, err)
	}
	if n := srv.Client(t).ZCard(ctx, p+"{k}:cc").Val(); n != 0 {
		t.Errorf("%d leases held after the only one was released", n)
	}
}

// TestConcurrencyLeaseExpiresNoLater delays every reply by 100ms: the
// Expires a holder is told must not be later than the expiry Redis keeps,
// or the holder works on after its slot went to someone else. It was set
// from the time the reply arrived, a round trip late.
func TestConcurrencyLeaseExpiresNoLater(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	px := faultproxy.Start(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: px.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	p := redistest.Prefix(t)
	cc, err := NewConcurrency(c, WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	px.Delay(100 * time.Millisecond)
	l, r, err := cc.Acquire(t.Context(), "k", ConcurrencyLimit{MaxInFlight: 2, LeaseTTL: time.Minute})
	if err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	score, err := srv.Client(t).ZScore(t.Context(), p+"{k}:cc", l.ID).Result()
	if err != nil {
		t.Fatal(err)
	}
	if late := l.Expires.UnixMicro() - int64(score); late > 0 {
		t.Errorf("Lease.Expires is %v later than the lease's expiry in Redis", time.Duration(late)*time.Microsecond)
	}
}
