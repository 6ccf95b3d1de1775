package global

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

var allAlgorithms = []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog}

// TestRefundAt gives back what decisions took, at virtual times: the
// tokens or the count come back, never beyond the burst, and a key with
// nothing to give back gives nothing.
func TestRefundAt(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	three := hybridlimit.PerMinute(3)
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l, err := New(c, alg, WithPrefix(p))
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			allow := func(key string, cost int64, want bool) {
				t.Helper()
				r, err := l.AllowAt(ctx, t0, key, three, cost)
				if err != nil || r.Allowed != want {
					t.Fatalf("AllowAt(t0, %s, %d) = %+v, %v; want allowed %v", key, cost, r, err, want)
				}
			}
			refund := func(key string, cost, want int64) {
				t.Helper()
				got, err := l.RefundAt(ctx, t0, key, three, cost)
				if err != nil || got != want {
					t.Fatalf("RefundAt(t0, %s, %d) = %d, %v; want %d", key, cost, got, err, want)
				}
			}
			// Spent, denied, one given back: one more admitted.
			allow("a", 3, true)
			allow("a", 1, false)
			refund("a", 1, 1)
			allow("a", 1, true)
			allow("a", 1, false)
			// Never above the burst.
			allow("b", 1, true)
			refund("b", 3, 1)
			allow("b", 3, true)
			allow("b", 1, false)
			// Nothing taken, nothing given back.
			refund("fresh", 2, 0)
			allow("fresh", 3, true)
			allow("fresh", 1, false)
			if _, err := l.RefundAt(ctx, t0, "a", three, 4); !errors.Is(err, hybridlimit.ErrCostExceedsBurst) {
				t.Errorf("RefundAt(cost 4 > burst 3) = %v, want ErrCostExceedsBurst", err)
			}
			if _, err := l.RefundAt(ctx, t0, "", three, 1); !errors.Is(err, hybridlimit.ErrInvalidKey) {
				t.Errorf("RefundAt(empty key) = %v, want ErrInvalidKey", err)
			}
		})
	}
	checkTTLs(t, c, p)
}

// TestRefundWindowOver: a window's count that restarted has nothing to
// give back; the sliding window takes what its current count lacks from
// the previous one's.
func TestRefundWindowOver(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	three := hybridlimit.PerMinute(3)
	for _, tt := range []struct {
		alg  Algorithm
		at   time.Duration // of the refund, after 3 admitted at t0
		want int64
	}{
		{FixedWindow, time.Minute, 0},
		{SlidingWindow, time.Minute, 2},
		{SlidingWindow, 2 * time.Minute, 0},
		{SlidingLog, time.Minute, 0},
		{SlidingLog, 59 * time.Second, 2},
	} {
		l, err := New(c, tt.alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%v-%v", tt.alg, tt.at)
		if r, err := l.AllowAt(t.Context(), t0, key, three, 3); err != nil || !r.Allowed {
			t.Fatalf("%v: AllowAt = %+v, %v", tt.alg, r, err)
		}
		if got, err := l.RefundAt(t.Context(), t0.Add(tt.at), key, three, 2); err != nil || got != tt.want {
			t.Errorf("%v: RefundAt(t0+%v, 2) after 3 at t0 = %d, %v; want %d", tt.alg, tt.at, got, err, tt.want)
		}
	}
}

// TestSlidingLogRefundRemovesEntry: a refund removes the entry of its
// cost; a cost no entry has comes off the newest entries.
func TestSlidingLogRefundRemovesEntry(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	l, err := New(c, SlidingLog, WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	ten := hybridlimit.PerMinute(10)
	ctx := t.Context()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	members := func(key string) []string {
		keys, _ := keyNames(l.ks, key, kindSlidingLog)
		m, err := c.ZRange(ctx, keys[0], 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tt := range []struct {
		refund int64
		want   []string
		rem    int64
	}{
		// The entry of that cost.
		{3, []string{fmt.Sprintf("%d:1:2", t0.UnixMicro()), fmt.Sprintf("%d:3:1", at(2).UnixMicro())}, 7},
		// No entry of 5: the newest two whole, then one off the oldest.
		{5, []string{fmt.Sprintf("%d:1:1", t0.UnixMicro())}, 9},
	} {
		key := fmt.Sprint(tt.refund)
		for i, cost := range []int64{2, 3, 1} {
			if r, err := l.AllowAt(ctx, at(i), key, ten, cost); err != nil || !r.Allowed {
				t.Fatalf("AllowAt(%d) = %+v, %v", cost, r, err)
			}
		}
		if got, err := l.RefundAt(ctx, at(3), key, ten, tt.refund); err != nil || got != tt.refund {
			t.Fatalf("RefundAt(%d) = %d, %v", tt.refund, got, err)
		}
		if m := members(key); !slices.Equal(m, tt.want) {
			t.Errorf("entries 2, 3, 1, refund %d: %q, want %q", tt.refund, m, tt.want)
		}
		if r, err := l.PeekAt(ctx, at(3), key, ten, 1); err != nil || r.Remaining != tt.rem {
			t.Errorf("refund %d: PeekAt = %+v, %v; want %d remaining", tt.refund, r, err, tt.rem)
		}
	}
	checkTTLs(t, c, p)
}

// TestRefundUnderConcurrency: many goroutines on two topologies admit and
// give back at once, by the Redis clock; every refund is exact, so when
// they are done the key is as full as it started (the token algorithms),
// or its count is back to 0 (the windows), and at least a burst was
// admitted and given back many times over.
func TestRefundUnderConcurrency(t *testing.T) {
	redistest.NoLeaks(t)
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			c := topo.Dial(t)
			p := redistest.Prefix(t)
			// Slow refills, so that what comes back is the refunds.
			limit := hybridlimit.Limit{Rate: 1, Period: time.Hour, Burst: 20}
			for _, alg := range allAlgorithms {
				l, err := New(c, alg, WithPrefix(p))
				if err != nil {
					t.Fatal(err)
				}
				var (
					wg       sync.WaitGroup
					mu       sync.Mutex
					admitted int
				)
				for g := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 40 {
							r, err := l.AllowN(t.Context(), "hot", limit, 1+int64(g%3))
							if err != nil {
								t.Error(err)
								return
							}
							if !r.Allowed {
								continue
							}
							mu.Lock()
							admitted++
							mu.Unlock()
							if err := l.Refund(t.Context(), "hot", limit, 1+int64(g%3)); err != nil {
								t.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				r, err := l.Peek(t.Context(), "hot", limit)
				if err != nil {
					t.Fatal(err)
				}
				if r.Remaining != limit.Burst || admitted <= int(limit.Burst) {
					t.Errorf("%v: after %d admitted and given back, Remaining = %d, want %d", alg, admitted, r.Remaining, limit.Burst)
				}
			}
			checkTTLs(t, c, p)
		})
	}
}

// TestReset forgets a key on every algorithm and the concurrency limiter:
// its next decision finds the full quota, and its state is gone from
// Redis.
func TestReset(t *testing.T) {
	redistest.NoLeaks(t)
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			c := topo.Dial(t)
			p := redistest.Prefix(t)
			limit := hybridlimit.PerHour(3)
			for _, alg := range allAlgorithms {
				l, err := New(c, alg, WithPrefix(p))
				if err != nil {
					t.Fatal(err)
				}
				if r, err := l.AllowN(t.Context(), "{k}", limit, 3); err != nil || !r.Allowed {
					t.Fatalf("%v: AllowN = %+v, %v", alg, r, err)
				}
				if err := l.Reset(t.Context(), "{k}"); err != nil {
					t.Fatalf("%v: Reset: %v", alg, err)
				}
				if n, _ := redistest.KeysWithoutTTL(t, c, p); len(n) > 0 {
					t.Errorf("%v: keys without TTL after Reset: %q", alg, n)
				}
				if _, seen := redistest.KeysWithoutTTL(t, c, p); seen != 0 {
					t.Errorf("%v: %d keys left after Reset", alg, seen)
				}
				if r, err := l.AllowN(t.Context(), "{k}", limit, 3); err != nil || !r.Allowed {
					t.Errorf("%v: after Reset AllowN(3) = %+v, %v; want the full quota", alg, r, err)
				}
				if err := l.Reset(t.Context(), "{k}"); err != nil {
					t.Fatal(err)
				}
			}
			cc, err := NewConcurrency(c, WithPrefix(p))
			if err != nil {
				t.Fatal(err)
			}
			one := ConcurrencyLimit{MaxInFlight: 1, LeaseTTL: time.Minute}
			lease, r, err := cc.Acquire(t.Context(), "job", one)
			if err != nil || !r.Allowed {
				t.Fatalf("Acquire = %+v, %v", r, err)
			}
			if err := cc.Reset(t.Context(), "job"); err != nil {
				t.Fatal(err)
			}
			if lease2, r, err := cc.Acquire(t.Context(), "job", one); err != nil || !r.Allowed {
				t.Errorf("after Reset, Acquire = %+v, %v; want granted", r, err)
			} else if _, err := cc.Release(t.Context(), lease2); err != nil {
				t.Error(err)
			}
			if held, err := cc.Release(t.Context(), lease); err != nil || held {
				t.Errorf("Release of a lease Reset dropped = %v, %v; want false", held, err)
			}
			var zero *Limiter
			if err := zero.Reset(t.Context(), "k"); !errors.Is(err, hybridlimit.ErrNilClient) {
				t.Errorf("nil Limiter: Reset = %v", err)
			}
			if err := cc.Reset(t.Context(), ""); !errors.Is(err, hybridlimit.ErrInvalidKey) {
				t.Errorf("Concurrency.Reset(empty key) = %v, want ErrInvalidKey", err)
			}
		})
	}
}
