package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestStallVisible stalls Redis (SIGSTOP) under a hybrid limiter with the
// FailClosed policy behind the middleware: requests are never held, and
// from the first request the stall touches, before the breaker opens as
// after, the policy's denials are answered 503 (the quota could not be
// checked), never 429. The metrics show why: the breaker is open and the
// denials come from the failure policy.
func TestStallVisible(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	const interval = 50 * time.Millisecond
	l, err := hlsync.New(rdb, hlsync.WithFailurePolicy(hybridlimit.FailClosed), hlsync.WithSyncInterval(interval, 0),
		hlsync.WithMaxWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	m, err := httplimit.New([]httplimit.Rule{{Name: "per-ip", Limiter: l, Limit: hybridlimit.PerMinute(100), Key: httplimit.IP(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	t.Cleanup(hs.Close)
	hc, err := NewHybridCollector(l)
	if err != nil {
		t.Fatal(err)
	}
	status := func() int {
		t.Helper()
		start := time.Now()
		resp, err := hs.Client().Get(hs.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("request took %v during a stall", d)
		}
		return resp.StatusCode
	}
	for start := time.Now(); status() != 200; { // warm up the connection and the script cache
		if time.Since(start) > 5*time.Second {
			t.Fatal("no admission before the stall")
		}
	}

	// Idle with Redis up: nothing to sync, nothing stale, however long
	// since the last round.
	staleness := func() float64 { return testutil.ToFloat64(onlyMetric(hc, "hybridlimit_sync_view_staleness_seconds")) }
	time.Sleep(30 * interval)
	if s := staleness(); s != 0 {
		t.Errorf("view staleness %v s on an idle instance with Redis up (%v since the last round), want 0", s, l.Stats().SinceSync)
	}

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Signal(syscall.SIGCONT) })
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(onlyMetric(hc, "hybridlimit_sync_breaker_open")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("breaker still closed 5s into the stall")
		}
		if s := status(); s == 429 {
			t.Fatal("429 before the breaker opened: Redis's absence answered as a quota exceeded")
		}
	}
	// Allowance fetched before the stall is still spent (Redis granted
	// it); past it, the policy denies.
	got503 := false
	for range 200 {
		switch s := status(); s {
		case 503:
			got503 = true
		case 429:
			t.Fatal("429 for a failure-policy denial: no quota was exceeded")
		}
		if got503 {
			break
		}
	}
	if !got503 {
		t.Fatal("no 503 under a FailClosed stall")
	}
	if s := staleness(); s <= 0 {
		t.Errorf("view staleness %v s with Redis stalled and rounds unanswered, want above 0", s)
	}
	if n := testutil.ToFloat64(labelled(hc, "hybridlimit_sync_decisions_total", "denied", "fail_closed")); n < 1 {
		t.Errorf("fail_closed denials = %v, want at least 1", n)
	}
	if n := testutil.ToFloat64(labelled(hc, "hybridlimit_sync_errors_total", "timeout")); n < 2 {
		t.Errorf("timeouts = %v, want at least the 2 that opened the breaker", n)
	}
	if n := testutil.ToFloat64(onlyMetric(hc, "hybridlimit_sync_breaker_opens_total")); n != 1 {
		t.Errorf("breaker opens = %v, want 1", n)
	}
	mc, err := NewMiddlewareCollector(m)
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(labelled(mc, "hybridlimit_http_requests_total", "unavailable")); n < 1 {
		t.Errorf("unavailable requests = %v, want at least 1", n)
	}
	if n := testutil.ToFloat64(labelled(mc, "hybridlimit_http_rule_decisions_total", "hybrid", "enforce", "error_closed", "per-ip")); n < 1 {
		t.Errorf("per-ip error_closed outcomes = %v, want at least 1", n)
	}
}
