package sync_test

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestFailurePolicies stalls Redis (SIGSTOP) under a running limiter and
// checks that each policy decides as it says (Source fallback), that no
// decision hangs, that the breaker opens, that the failed calls count as
// timeouts, and that the limiter recovers by itself once Redis answers
// again.
func TestFailurePolicies(t *testing.T) {
	for _, policy := range []hybridlimit.FailurePolicy{hybridlimit.FallbackLocal, hybridlimit.FailOpen, hybridlimit.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			redistest.NoLeaks(t)
			srv := redistest.Start(t)
			const interval, maxWait = 50 * time.Millisecond, 20 * time.Millisecond
			// The recommended client: it honours context deadlines, so a
			// round on a stalled server ends at the round timeout.
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			l, err := hlsync.New(c, hlsync.WithFailurePolicy(policy),
				hlsync.WithSyncInterval(interval, 0), hlsync.WithMaxWait(maxWait))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			ctx := context.Background()
			limit := hybridlimit.PerMinute(10)
			// The first decision may outlast the short max wait while the
			// client connects and the script loads: warm up.
			for start := time.Now(); ; {
				r, err := l.Allow(ctx, "warm", limit)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					break
				}
				if time.Since(start) > 2*time.Second {
					t.Fatalf("Allow before the stall = %+v", r)
				}
			}

			if err := srv.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stalled := true
			t.Cleanup(func() {
				if stalled {
					_ = srv.Signal(syscall.SIGCONT)
				}
			})
			deadline := time.Now().Add(5 * time.Second)
			for !l.Stats().BreakerOpen {
				if time.Now().After(deadline) {
					t.Fatalf("breaker still closed 5s into the stall: %+v", l.Stats())
				}
				decide(t, l, "probe", limit, maxWait)
			}
			allowed := 0
			for i := range 20 {
				r := decide(t, l, fmt.Sprintf("k%d", i%2), limit, maxWait)
				if r.Allowed {
					allowed++
				}
				if r.Source != hybridlimit.SourceFallback {
					t.Errorf("decision %d while the breaker is open = %+v, want Source fallback", i, r)
				}
				// Only the policy that refuses what it cannot check says
				// so: a fallback share's denial is the limit's.
				if r.FailedClosed != (policy == hybridlimit.FailClosed) {
					t.Errorf("decision %d under %v: FailedClosed %v", i, policy, r.FailedClosed)
				}
			}
			s := l.Stats()
			switch policy {
			case hybridlimit.FailOpen:
				if allowed != 20 || s.FailOpen < 20 {
					t.Errorf("fail-open: allowed %d of 20, FailOpen = %d", allowed, s.FailOpen)
				}
			case hybridlimit.FailClosed:
				if allowed != 0 || s.FailClosed < 20 {
					t.Errorf("fail-closed: allowed %d of 20, FailClosed = %d", allowed, s.FailClosed)
				}
			case hybridlimit.FallbackLocal:
				// One live instance: its share is the whole limit, 10 per
				// key per minute, two keys.
				if allowed != 20 || s.FallbackAllowed < 20 {
					t.Errorf("fallback: allowed %d of 20, FallbackAllowed = %d", allowed, s.FallbackAllowed)
				}
				if r := decide(t, l, "k0", limit, maxWait); r.Allowed || r.RetryAfter <= 0 || r.Source != hybridlimit.SourceFallback || r.FailedClosed {
					t.Errorf("fallback: 11th decision on k0 = %+v, want denied by the fallback with a retry time", r)
				}
			}
			if s.Errors[hybridlimit.ErrorTimeout] < 2 {
				t.Errorf("Errors = %v, want at least the 2 timeouts that opened the breaker", s.Errors)
			}

			if err := srv.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			stalled = false
			for l.Stats().BreakerOpen {
				if time.Now().After(deadline.Add(5 * time.Second)) {
					t.Fatalf("breaker still open 5s after Redis came back: %+v", l.Stats())
				}
				time.Sleep(interval)
			}
			if s := l.Stats(); s.BreakerOpens != 1 || s.BreakerCloses != 1 {
				t.Errorf("BreakerOpens = %d, BreakerCloses = %d, want 1 and 1", s.BreakerOpens, s.BreakerCloses)
			}
			// Redis decides again. A fetch can outlast the 20ms max wait
			// on a machine loaded by other tests, and go to the policy,
			// so a fresh key each try, for up to 5s.
			until := time.Now().Add(5 * time.Second)
			for i := 0; ; i++ {
				r := decide(t, l, "fresh"+strconv.Itoa(i), limit, maxWait)
				if r.Allowed && r.Source == hybridlimit.SourceGlobal {
					break
				}
				if r.Source != hybridlimit.SourceFallback || time.Now().After(until) {
					t.Fatalf("Allow after recovery = %+v (try %d), want allowed from Redis", r, i+1)
				}
			}
		})
	}
}

// decide makes one decision and fails the test if it takes far longer than
// the max wait: a stalled Redis must never hold a request for seconds.
func decide(t *testing.T, l *hlsync.Limiter, key string, limit hybridlimit.Limit, maxWait time.Duration) hybridlimit.Result {
	t.Helper()
	start := time.Now()
	r, err := l.Allow(context.Background(), key, limit)
	if err != nil {
		t.Fatalf("Allow(%q) = %v", key, err)
	}
	// The slack allows for a loaded machine; what must never happen is a
	// wait as long as a round timeout or a dial.
	if d := time.Since(start); d > maxWait+2*time.Second {
		t.Fatalf("Allow(%q) took %v with max wait %v", key, d, maxWait)
	}
	return r
}

// TestOwedPaidUnasked checks that what the fallback admits reaches Redis
// once it answers, though no decision asks for the key again: a low-limit
// key (no lease, so nothing else brings it back to a round) is admitted
// by its share while its node's breaker, opened by another key, is open,
// and its debt must drain after the stall.
func TestOwedPaidUnasked(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	l, err := hlsync.New(c, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithSyncInterval(100*time.Millisecond, 0),
		hlsync.WithMaxWait(time.Second)) // with Redis up, Redis answers; while it stalls, the breaker does
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx, limit := context.Background(), hybridlimit.PerHour(20) // low: each decision asks Redis
	if r, err := l.Allow(ctx, "k", limit); err != nil || !r.Allowed || r.Source != hybridlimit.SourceGlobal {
		t.Fatalf("with Redis up: %+v, %v", r, err)
	}
	time.Sleep(300 * time.Millisecond) // the key's next round has passed: it is in none
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Signal(syscall.SIGCONT)
		}
	}()
	// Another key's decisions find Redis stalled and open the breaker.
	waitFor(t, "the breaker to open", func() bool {
		_, _ = l.Allow(ctx, "other", limit)
		return l.Stats().BreakerOpen
	})
	for range 3 {
		if r, err := l.Allow(ctx, "k", limit); err != nil || !r.Allowed || r.Source != hybridlimit.SourceFallback {
			t.Fatalf("with the breaker open: %+v, %v", r, err)
		}
	}
	owed := l.Stats().Owed // the other key's too
	if owed < 3 {
		t.Fatalf("owed %d, want at least the 3 the share admitted", owed)
	}
	resumed = true
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Redis to take what the share admitted", func() bool { return l.Stats().Owed == 0 })
}
