package sync_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	stdsync "sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestResultSource checks Result.Source on each path of a decision with
// Redis up: a fetch (global), allowance (local), a denial after a fetch
// (global) and one from a known empty bucket (local), and a full key table
// (fallback). The stalled-Redis paths are in TestFailurePolicies.
func TestResultSource(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	var ls [2]*hlsync.Limiter
	for i := range ls {
		l, err := hlsync.New(rdb, hlsync.WithPrefix(p), hlsync.WithMaxWait(2*time.Second), hlsync.WithRoundTimeout(5*time.Second), hlsync.WithMaxKeys(2),
			hlsync.WithInstanceID(fmt.Sprint("i", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		ls[i] = l
	}
	ctx := context.Background()
	leased := hybridlimit.PerSecond(1000) // leased ahead of demand: the first fetch brings more than one token
	exact := frozen(1)                    // a low limit: each decision fetches its cost
	steps := []struct {
		on      int // which limiter decides
		key     string
		limit   hybridlimit.Limit
		allowed bool
		source  hybridlimit.Source
	}{
		{0, "leased", leased, true, hybridlimit.SourceGlobal},  // new key: waits for a fetch
		{0, "leased", leased, true, hybridlimit.SourceLocal},   // spends the lease
		{1, "exact", exact, true, hybridlimit.SourceGlobal},    // fetches the one token
		{1, "exact", exact, false, hybridlimit.SourceLocal},    // the reply above said the bucket is empty
		{0, "exact", exact, false, hybridlimit.SourceGlobal},   // fetches, and Redis says empty
		{0, "third", leased, true, hybridlimit.SourceFallback}, // the table holds 2 keys: the failure policy decides
	}
	for i, s := range steps {
		l := ls[s.on]
		r, err := l.Allow(ctx, s.key, s.limit)
		if err != nil {
			t.Fatalf("step %d: Allow(%q) = %v", i, s.key, err)
		}
		if r.Allowed != s.allowed || r.Source != s.source {
			t.Errorf("step %d: Allow(%q) = %+v, want allowed %v from %v", i, s.key, r, s.allowed, s.source)
		}
	}
	if s := ls[0].Stats(); s.Fetches != 2 || s.DeniedRemote != 1 || s.FallbackAllowed != 1 {
		t.Errorf("first limiter's Stats = %+v, want 2 fetches, 1 remote denial, 1 fallback admission", s)
	}
}

// TestSourceRedisGone runs a limiter on the address of a Redis that has
// gone away: from the first decision, whose fetch gets no answer within
// the max wait, the failure policy decides (never a denial that claims
// the limit); none comes from Redis, and the failed calls are counted as
// connection errors. The round timeout outlasts go-redis's dial retries
// (5, some 0.4s in all), so the refusal rather than the deadline ends each
// call.
func TestSourceRedisGone(t *testing.T) {
	redistest.NoLeaksAfterKill(t)
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	const interval = 50 * time.Millisecond
	l, err := hlsync.New(rdb, hlsync.WithSyncInterval(interval, 0), hlsync.WithMaxWait(20*time.Millisecond),
		hlsync.WithRoundTimeout(5*time.Second), hlsync.WithFailurePolicy(hybridlimit.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	limit := hybridlimit.PerMinute(10)
	if r := decide(t, l, "k", limit, 20*time.Millisecond); r.Source != hybridlimit.SourceFallback || !r.Allowed {
		t.Errorf("first decision with Redis gone = %+v, want fail-open's admission", r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !l.Stats().BreakerOpen || l.Stats().Errors[hybridlimit.ErrorConnection] == 0 {
		if r := decide(t, l, "k", limit, 20*time.Millisecond); r.Source != hybridlimit.SourceFallback || !r.Allowed {
			t.Fatalf("decision with Redis gone = %+v, want fail-open's admission", r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker closed or no connection error counted 5s after Redis went: %+v", l.Stats())
		}
		time.Sleep(interval / 5)
	}
	s := l.Stats()
	for c, n := range s.Errors {
		if hybridlimit.ErrorClass(c) != hybridlimit.ErrorConnection && n != 0 {
			t.Errorf("Errors[%v] = %d, want 0 with Redis gone", hybridlimit.ErrorClass(c), n)
		}
	}
}

// TestDenialsCountedOnEveryCore denies a key at its limit from many
// goroutines at once: every denial is in Stats, whichever core made it.
func TestDenialsCountedOnEveryCore(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	l, err := hlsync.New(rdb, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithMaxWait(2*time.Second), hlsync.WithRoundTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	ctx := context.Background()
	limit := frozen(1)
	if r, err := l.Allow(ctx, "k", limit); err != nil || !r.Allowed {
		t.Fatalf("first Allow = %+v, %v; want the one token", r, err)
	}
	before := l.Stats().DeniedRemote
	const goroutines, each = 8, 500
	var wg stdsync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				if r, err := l.Allow(ctx, "k", limit); err != nil || r.Allowed {
					t.Errorf("Allow on an empty bucket = %+v, %v", r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := l.Stats().DeniedRemote - before; got != goroutines*each {
		t.Errorf("DeniedRemote grew by %d, want %d", got, goroutines*each)
	}
}

// TestLogsOncePerChange runs a limiter for 40 sync intervals against a
// Redis that has gone away: its log says so once per state change (the
// node's breaker opened, the presence record is not written), not once a
// round or a tick.
func TestLogsOncePerChange(t *testing.T) {
	redistest.NoLeaksAfterKill(t)
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	var lines logLines
	const interval = 50 * time.Millisecond
	l, err := hlsync.New(rdb, hlsync.WithSyncInterval(interval, 0), hlsync.WithMaxWait(20*time.Millisecond),
		hlsync.WithLogger(slog.New(&lines)))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(40 * interval); time.Now().Before(end); time.Sleep(interval / 5) {
		if r, err := l.Allow(context.Background(), "k", hybridlimit.PerMinute(600)); err != nil || r.Source != hybridlimit.SourceFallback {
			t.Fatalf("decision with Redis gone = %+v, %v; want the failure policy's", r, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = l.Close(ctx) // fails: Redis is gone
	got := lines.all()
	t.Logf("%d lines: %q", len(got), got)
	if len(got) == 0 || len(got) > 2 {
		t.Errorf("%d log lines in 40 intervals of a dead Redis, want the breaker opening and the presence failing, once each: %q", len(got), got)
	}
}

// logLines is a slog.Handler that keeps the messages of records at Info
// and above.
type logLines struct {
	mu   stdsync.Mutex
	msgs []string
}

func (h *logLines) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelInfo }
func (h *logLines) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}
func (h *logLines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logLines) WithGroup(string) slog.Handler      { return h }

func (h *logLines) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.msgs)
}
