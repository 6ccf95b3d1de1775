package sync_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestMaxMemoryNoEviction documents what a hybrid limiter does when Redis
// is out of memory under noeviction: the sync and presence scripts are
// refused at their first write (OOM), rounds fail, the breaker opens and
// the failure policy decides (here the default, FallbackLocal); no
// decision returns an error, the OOM reply reaches the log, and the
// limiter goes back to Redis by itself once memory is free.
func TestMaxMemoryNoEviction(t *testing.T) {
	redistest.NoLeaks(t)
	s := redistest.Start(t, "maxmemory-policy noeviction")
	c := s.Client(t)
	logs := &logCount{}
	const interval = 50 * time.Millisecond
	l, err := hlsync.New(c, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithSyncInterval(interval, 0.1),
		hlsync.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	limit := hybridlimit.PerMinute(100)
	allow := func(key string) hybridlimit.Result {
		t.Helper()
		r, err := l.Allow(t.Context(), key, limit)
		if err != nil {
			t.Fatalf("Allow(%q): %v", key, err)
		}
		return r
	}
	if r := allow("warm"); !r.Allowed {
		t.Fatalf("Allow before the limit = %+v", r)
	}
	if err := c.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	oomAt := time.Now()
	for i := 0; !l.Stats().BreakerOpen; i++ {
		if time.Since(oomAt) > 5*time.Second {
			t.Fatalf("breaker still closed 5s into OOM: %+v", l.Stats())
		}
		allow(fmt.Sprintf("new%d", i)) // new keys must ask Redis
		time.Sleep(5 * time.Millisecond)
	}
	opened := time.Since(oomAt)
	for i := range 10 {
		if r := allow(fmt.Sprintf("fb%d", i)); !r.Allowed {
			t.Errorf("Allow of a new key with the breaker open = %+v, want admitted by the fallback", r)
		}
	}
	if err := c.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	for l.Stats().BreakerOpen {
		if time.Since(freed) > 5*time.Second {
			t.Fatalf("breaker still open 5s after memory was freed: %+v", l.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	closed := time.Since(freed)
	st := l.Stats()
	msgs := logs.records()
	oomLogged := false
	for _, m := range msgs {
		oomLogged = oomLogged || strings.Contains(m, "OOM")
	}
	t.Logf("breaker opened %v into OOM, closed %v after memory was freed; %d admitted by the fallback; OOM replies %d; %d log records, the first %q",
		opened, closed, st.FallbackAllowed, s.ErrorReplies(t, "OOM"), len(msgs), msgs[0])
	if st.FallbackAllowed < 10 || !oomLogged {
		t.Errorf("FallbackAllowed = %d, OOM logged %v; want at least 10 and true", st.FallbackAllowed, oomLogged)
	}
	// The breaker's probe must fail as long as the sync script does: a
	// probe that succeeds under OOM closes the breaker every tick, and the
	// decisions in between are denied instead of decided by the policy.
	if st.BreakerOpens != 1 || st.BreakerCloses != 1 {
		t.Errorf("BreakerOpens = %d, BreakerCloses = %d, want 1 and 1 (no flapping)", st.BreakerOpens, st.BreakerCloses)
	}
	if r := allow("after"); !r.Allowed {
		t.Errorf("Allow after recovery = %+v", r)
	}
}

// TestMaxMemoryEviction documents what eviction (allkeys-lru) does to a
// hybrid limit: a drained key's bucket and ledgers are evicted like any
// other key, and an evicted bucket looks full, so an instance that asks
// Redis next is granted one more burst. The instance that drained it keeps
// denying until the retry time Redis gave it. Bound: one extra burst per
// eviction of the key.
func TestMaxMemoryEviction(t *testing.T) {
	redistest.NoLeaks(t)
	s := redistest.Start(t, "maxmemory-policy allkeys-lru")
	p := redistest.Prefix(t)
	const burst = 10
	limit := frozen(burst)
	newClient := func() hybridlimit.Redis { return s.Client(t) }
	ls := newLimiters(t, 2, newClient, hlsync.WithPrefix(p))
	drain := func(l *hlsync.Limiter) (admitted int) {
		for range 2 * burst {
			r, err := l.Allow(t.Context(), "k", limit)
			if err != nil {
				t.Fatalf("%s: Allow: %v", l.InstanceID(), err)
			}
			if r.Allowed {
				admitted++
			}
		}
		return admitted
	}
	if n := drain(ls[0]); n != burst {
		t.Fatalf("%s admitted %d, want %d", ls[0].InstanceID(), n, burst)
	}
	fillers := s.EvictAll(t, p)
	again, other := drain(ls[0]), drain(ls[1])
	t.Logf("after eviction (%d filler values): the draining instance admitted %d more, a new one %d (burst %d)", fillers, again, other, burst)
	if again != 0 {
		t.Errorf("%s admitted %d after eviction, want 0 (it holds Redis's retry time)", ls[0].InstanceID(), again)
	}
	if other != burst {
		t.Errorf("%s admitted %d after eviction, want one full burst of %d (an evicted bucket looks full)", ls[1].InstanceID(), other, burst)
	}
	for _, l := range ls {
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	noTTL, _ := redistest.KeysWithoutTTL(t, newClient().(*redis.Client), p)
	if len(noTTL) > 0 {
		t.Errorf("keys without TTL %v", noTTL)
	}
}
