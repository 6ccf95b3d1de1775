package httplimit

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// newHybrid starts a hybrid limiter on the shared Redis, closed when the
// test ends. The max wait is generous: the first fetch on a cold
// connection must not be mistaken for a denial.
func newHybrid(t testing.TB, rdb hybridlimit.Redis) *hlsync.Limiter {
	t.Helper()
	l, err := hlsync.New(rdb, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithMaxWait(2*time.Second),
		hlsync.WithSyncInterval(50*time.Millisecond, 0.1))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// serve returns a test server running m in front of a handler that answers
// 200 "ok", closed when the test ends.
func serve(t *testing.T, m *Middleware) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func get(t *testing.T, c *http.Client, url string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, body}
}

// checkProblem checks a rejection's body and caching headers.
func checkProblem(t *testing.T, r response, status int, typ string, violated ...string) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q", cc)
	}
	var p struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	if p.Type != typ || p.Status != status || p.Title == "" || len(p.Violated) != len(violated) {
		t.Errorf("problem = %+v, want type %s, status %d, violated %q", p, typ, status, violated)
	}
	for i := range violated {
		if i < len(p.Violated) && p.Violated[i] != violated[i] {
			t.Errorf("violated-policies = %q, want %q", p.Violated, violated)
		}
	}
}

func retryAfter(t *testing.T, r response) int64 {
	t.Helper()
	v := r.header.Get(HeaderRetryAfter)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		t.Fatalf("Retry-After = %q, want delay-seconds >= 1", v)
	}
	return n
}

// TestMiddlewareRedis runs real HTTP round trips through the middleware
// with a hybrid per-IP rule and an exact per-API-key rule on a real Redis.
func TestMiddlewareRedis(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	hybrid := newHybrid(t, rdb)
	exact, err := global.New(rdb, global.GCRA, global.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New([]Rule{
		{Name: "per-ip", Limiter: hybrid, Limit: hybridlimit.PerMinute(5), Key: IP(nil)},
		{Name: "per-key", Limiter: exact, Limit: hybridlimit.PerMinute(3), Key: APIKey("X-API-Key")},
	}, WithLegacyHeaders())
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m)
	c := srv.Client()

	// Three requests with a key: the per-key rule, with less left, is the
	// tightest; GCRA's remaining is exact.
	for i := range 3 {
		r := get(t, c, srv.URL, "X-API-Key", "k1")
		if r.status != 200 || string(r.body) != "ok" {
			t.Fatalf("request %d: %d %q", i, r.status, r.body)
		}
		policy, state := fields(t, r.header)
		if len(policy) != 1 || policy[0].Name != "per-key" || policy[0].Params["q"] != 3 || policy[0].Params["w"] != 60 {
			t.Errorf("request %d: RateLimit-Policy = %v, want per-key q=3 w=60", i, policy)
		}
		if state[0].Params["r"] != int64(2-i) {
			t.Errorf("request %d: RateLimit = %v, want r=%d", i, state, 2-i)
		}
		if r.header.Get(HeaderRetryAfter) != "" {
			t.Errorf("request %d: Retry-After on an admitted request", i)
		}
		if r.header.Get(HeaderLegacyRemaining) != strconv.Itoa(2-i) || r.header.Get(HeaderLegacyLimit) != "3" {
			t.Errorf("request %d: legacy fields %q %q", i, r.header.Get(HeaderLegacyLimit), r.header.Get(HeaderLegacyRemaining))
		}
	}
	// The fourth is over the per-key quota: 429, one token every 20 s.
	r := get(t, c, srv.URL, "X-API-Key", "k1")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("4th request: %d, want 429", r.status)
	}
	if ra := retryAfter(t, r); ra < 19 || ra > 20 {
		t.Errorf("Retry-After = %d, want 20 (one token of 3 a minute)", ra)
	}
	checkProblem(t, r, 429, ProblemQuotaExceeded, "per-key")
	policy, state := fields(t, r.header)
	if policy[0].Name != "per-key" || state[0].Params["r"] != 0 {
		t.Errorf("429 fields = %v %v, want per-key r=0", policy, state)
	}

	// Without a key only the hybrid per-IP rule applies. It admitted the
	// fourth request, which the per-key rule denied: given back if the
	// hybrid limiter refunds, so it has five or four of five spent, and
	// denies the sixth or the seventh request.
	_, refunds := any(hybrid).(interface {
		Refund(context.Context, string, hybridlimit.Limit, int64) error
	})
	left := 1
	if refunds {
		left = 2
	}
	for i := range left {
		if r = get(t, c, srv.URL); r.status != 200 {
			t.Fatalf("keyless request %d: %d", i, r.status)
		}
		if _, state := fields(t, r.header); state[0].Name != "per-ip" || state[0].Params["r"] > int64(left-1-i) {
			t.Errorf("keyless request %d: RateLimit = %v, want per-ip r<=%d", i, state, left-1-i)
		}
	}
	r = get(t, c, srv.URL)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("per-IP request past the quota: %d, want 429", r.status)
	}
	retryAfter(t, r)
	checkProblem(t, r, 429, ProblemQuotaExceeded, "per-ip")
	if _, state := fields(t, r.header); state[0].Name != "per-ip" || state[0].Params["r"] != 0 {
		t.Errorf("per-IP request past the quota: RateLimit = %v", state)
	}

	s := m.Stats()
	if s.Admitted != uint64(3+left) || s.Limited != 2 {
		t.Errorf("Stats: admitted %d limited %d, want %d and 2", s.Admitted, s.Limited, 3+left)
	}
	if s.Rules[0].Limiter != "hybrid" || s.Rules[1].Limiter != "global" {
		t.Errorf("limiter kinds %q %q", s.Rules[0].Limiter, s.Rules[1].Limiter)
	}
	// The request per-ip denied never reached per-key.
	if got := s.Rules[1].Outcomes; got[rules.OutcomeAllowed] != 3 || got[rules.OutcomeDenied] != 1 || got[rules.OutcomeNoKey] != uint64(left) {
		t.Errorf("per-key outcomes = %v", got)
	}
	if got, want := s.Rules[0].Outcomes, rules.OutcomeUnrefunded; refunds {
		want = rules.OutcomeRefunded
		if got[want] != 1 {
			t.Errorf("per-ip outcomes = %v, want 1 %v", got, want)
		}
	} else if got[want] != 1 {
		t.Errorf("per-ip outcomes = %v, want 1 %v", got, want)
	}
}

// TestMiddlewareShadowAndExempt: a shadow rule counts and never rejects;
// exempt requests skip a rule.
func TestMiddlewareShadowAndExempt(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	exact, err := global.New(rdb, global.SlidingWindow, global.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := local.NewTable()
	if err != nil {
		t.Fatal(err)
	}
	loc, err := rules.NewLocal(tbl)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New([]Rule{
		{Name: "trial", Limiter: exact, Limit: hybridlimit.PerMinute(1), Key: Static("all"), Shadow: true},
		{Name: "local", Limiter: loc, Limit: hybridlimit.PerMinute(2), Key: IP(nil), Exempt: PathPrefixes("/healthz")},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m)
	c := srv.Client()
	for i := range 5 {
		r := get(t, c, srv.URL+"/healthz")
		if r.status != 200 {
			t.Fatalf("exempt request %d: %d", i, r.status)
		}
		if r.header.Get(HeaderRateLimit) != "" {
			t.Errorf("exempt request %d reports %q", i, r.header.Get(HeaderRateLimit))
		}
	}
	for i, want := range []int{200, 200, 429} {
		if r := get(t, c, srv.URL+"/x"); r.status != want {
			t.Errorf("request %d to /x: %d, want %d", i, r.status, want)
		}
	}
	s := m.Stats().Rules
	if s[0].Outcomes[rules.OutcomeAllowed] != 1 || s[0].Outcomes[rules.OutcomeShadowDenied] != 7 {
		t.Errorf("shadow outcomes = %v, want 1 allowed, 7 shadow-denied", s[0].Outcomes)
	}
	if s[1].Outcomes[rules.OutcomeExempt] != 5 || s[1].Outcomes[rules.OutcomeAllowed] != 2 || s[1].Outcomes[rules.OutcomeDenied] != 1 {
		t.Errorf("local outcomes = %v", s[1].Outcomes)
	}
}

// TestMiddlewareRedisDown: an exact limiter whose Redis refuses
// connections returns ErrUnavailable; each rule's failure policy decides,
// visibly in status, fields and counters.
func TestMiddlewareRedisDown(t *testing.T) {
	redistest.NoLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	down, err := global.New(rdb, global.GCRA)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := local.NewTable()
	if err != nil {
		t.Fatal(err)
	}
	loc, _ := rules.NewLocal(tbl)
	for _, policy := range []hybridlimit.FailurePolicy{hybridlimit.FailOpen, hybridlimit.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			m, err := New([]Rule{
				{Name: "exact", Limiter: down, Limit: limit10, Key: IP(nil), OnError: policy, FailRetry: 2 * time.Second},
				{Name: "local", Limiter: loc, Limit: hybridlimit.PerMinute(1000), Key: Static(policy.String())},
			})
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, m)
			r := get(t, srv.Client(), srv.URL)
			// Fail closed ends the evaluation: the local rule is not asked.
			policyF, _ := fields(t, r.header)
			if policy == hybridlimit.FailOpen && (len(policyF) != 1 || policyF[0].Name != "local") || policy == hybridlimit.FailClosed && len(policyF) != 0 {
				t.Errorf("fields report %v, want only the local rule under fail open, none under fail closed", policyF)
			}
			s := m.Stats()
			if s.Rules[0].Errors[hybridlimit.ErrorUnavailable] != 1 {
				t.Errorf("unavailable errors = %d, want 1", s.Rules[0].Errors[hybridlimit.ErrorUnavailable])
			}
			switch policy {
			case hybridlimit.FailOpen:
				if r.status != 200 || s.Rules[0].Outcomes[rules.OutcomeErrorOpen] != 1 {
					t.Errorf("fail open: status %d, outcomes %v", r.status, s.Rules[0].Outcomes)
				}
			case hybridlimit.FailClosed:
				if r.status != 503 || s.Rules[0].Outcomes[rules.OutcomeErrorClosed] != 1 || s.Unavailable != 1 {
					t.Errorf("fail closed: status %d, outcomes %v, unavailable %d", r.status, s.Rules[0].Outcomes, s.Unavailable)
				}
				if ra := retryAfter(t, r); ra != 2 {
					t.Errorf("Retry-After = %d, want 2", ra)
				}
				checkProblem(t, r, 503, ProblemTemporaryReducedCapacity)
			}
		})
	}
}

// TestMiddlewareHybridClosed: a closed hybrid limiter returns
// sync.ErrClosed, which a FailClosed rule turns into a 503, counted by class.
func TestMiddlewareHybridClosed(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	hybrid, err := hlsync.New(rdb, hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := hybrid.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, err := New([]Rule{{Name: "h", Limiter: hybrid, Limit: limit10, Key: IP(nil), OnError: hybridlimit.FailClosed}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m)
	r := get(t, srv.Client(), srv.URL)
	if r.status != 503 || m.Stats().Rules[0].Errors[hybridlimit.ErrorClosed] != 1 {
		t.Errorf("closed hybrid limiter: status %d, errors %v", r.status, m.Stats().Rules[0].Errors)
	}
}

// TestMiddlewareFallbackShareDenialIs429: a denial by a limiter's fallback
// share (Source SourceFallback, Redis out of reach, FailedClosed false) is
// over a limit, if a coarse local one: 429 quota-exceeded naming the rule,
// with Retry-After, and the rule reported with nothing left and the
// share's wait as t. It was answered 503 temporary-reduced-capacity.
func TestMiddlewareFallbackShareDenialIs429(t *testing.T) {
	m, err := New([]Rule{{Name: "per-ip", Limiter: answer(fallbackDenied(2*time.Second), nil), Limit: limit10, Key: IP(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m)
	r := get(t, srv.Client(), srv.URL)
	if r.status != 429 {
		t.Errorf("status %d, want 429", r.status)
	}
	checkProblem(t, r, 429, ProblemQuotaExceeded, "per-ip")
	if ra := retryAfter(t, r); ra != 2 {
		t.Errorf("Retry-After = %d, want 2", ra)
	}
	policy, state := fields(t, r.header)
	if len(policy) != 1 || policy[0].Params["q"] != 10 || policy[0].Params["w"] != 60 ||
		state[0].Params["r"] != 0 || state[0].Params["t"] != 2 {
		t.Errorf("fields %v / %v, want the rule's q=10;w=60 and r=0;t=2", policy, state)
	}
	if s := m.Stats(); s.Unavailable != 0 || s.Limited != 1 || s.Rules[0].Outcomes[rules.OutcomeDenied] != 1 {
		t.Errorf("Stats: unavailable %d, limited %d, outcomes %v; want 0, 1, one denied", s.Unavailable, s.Limited, s.Rules[0].Outcomes)
	}
}

// TestMiddlewareFailedClosedIs503: a denial by a limiter's FailClosed
// policy (Result.FailedClosed: Redis could not be asked, and the user
// chose to refuse what cannot be checked) is an outage, not a quota the
// client exceeded: 503 temporary-reduced-capacity, no quota reported.
func TestMiddlewareFailedClosedIs503(t *testing.T) {
	m, err := New([]Rule{{Name: "per-ip", Limiter: answer(failedClosed(2*time.Second), nil), Limit: limit10, Key: IP(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m)
	r := get(t, srv.Client(), srv.URL)
	if r.status != 503 {
		t.Errorf("status %d, want 503", r.status)
	}
	checkProblem(t, r, 503, ProblemTemporaryReducedCapacity)
	if ra := retryAfter(t, r); ra != 2 {
		t.Errorf("Retry-After = %d, want 2", ra)
	}
	if policy, _ := fields(t, r.header); len(policy) != 0 {
		t.Errorf("fields report %v, want none: the quota was not checked", policy)
	}
	if s := m.Stats(); s.Unavailable != 1 || s.Limited != 0 || s.Rules[0].Outcomes[rules.OutcomeErrorClosed] != 1 {
		t.Errorf("Stats: unavailable %d, limited %d, outcomes %v; want 1, 0, one error_closed", s.Unavailable, s.Limited, s.Rules[0].Outcomes)
	}
}

// unreachableRedis returns a client of an address nothing listens on.
func unreachableRedis(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// startOutage starts a hybrid limiter of policy on rdb, which refuses
// connections, and waits for its breaker to open, deciding through m
// meanwhile (for an address no later request comes from).
func startOutage(t *testing.T, rdb *redis.Client, policy hybridlimit.FailurePolicy, m func(l *hlsync.Limiter) *Middleware) *Middleware {
	t.Helper()
	hyb, err := hlsync.New(rdb, hlsync.WithFailurePolicy(policy), hlsync.WithMaxWait(300*time.Millisecond),
		hlsync.WithSyncInterval(50*time.Millisecond, 0.1))
	if err != nil {
		t.Fatal(err)
	}
	if err := hyb.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = hyb.Close(ctx) // Redis is down: the final flush fails
	})
	mw := m(hyb)
	// Until the breaker opens, the limiter denies for want of allowance
	// (SourceLocal), not by its failure policy.
	for deadline := time.Now().Add(5 * time.Second); !hyb.Stats().BreakerOpen; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not open within 5s of Redis refusing connections")
		}
		if _, err := mw.Check(httptest.NewRequest("GET", "/", nil)); err != nil {
			t.Fatal(err)
		}
	}
	return mw
}

// TestMiddlewareHybridFallbackOutage: the hybrid limiter with its default
// policy, hybridlimit.FallbackLocal, and Redis unreachable enforces its share of the
// limit (all of it, as the one instance it knows of); the requests over
// it are answered 429 quota-exceeded with Retry-After and r=0 with t, and
// none 503. They were all answered 503 temporary-reduced-capacity.
func TestMiddlewareHybridFallbackOutage(t *testing.T) {
	m := startOutage(t, unreachableRedis(t), hybridlimit.FallbackLocal, func(l *hlsync.Limiter) *Middleware {
		m, err := New([]Rule{{Name: "per-ip", Limiter: l, Limit: hybridlimit.PerMinute(10), Key: IP(nil)}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
	srv := serve(t, m)
	codes := map[int]int{}
	for range 15 {
		r := get(t, srv.Client(), srv.URL)
		codes[r.status]++
		if r.status != 429 {
			continue
		}
		checkProblem(t, r, 429, ProblemQuotaExceeded, "per-ip")
		ra := retryAfter(t, r)
		_, state := fields(t, r.header)
		if tt, ok := state[0].Params["t"]; len(state) != 1 || state[0].Params["r"] != 0 || !ok || tt < 1 || tt > ra {
			t.Errorf("429 with RateLimit %v and Retry-After %d, want r=0 and 1 <= t <= Retry-After", state, ra)
		}
	}
	if codes[503] != 0 || codes[429] < 4 || codes[200] < 10 {
		t.Errorf("15 requests to a share of 10 a minute: %v, want 10 or 11 admitted, the rest 429, none 503", codes)
	}
}

// TestMiddlewareHybridFailClosedOutage: the hybrid limiter with its
// FailClosed policy and Redis unreachable denies by that policy once its
// breaker is open; the middleware answers 503 temporary-reduced-capacity,
// not 429.
func TestMiddlewareHybridFailClosedOutage(t *testing.T) {
	m := startOutage(t, unreachableRedis(t), hybridlimit.FailClosed, func(l *hlsync.Limiter) *Middleware {
		m, err := New([]Rule{{Name: "per-ip", Limiter: l, Limit: hybridlimit.PerMinute(100), Key: IP(nil)}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
	srv := serve(t, m)
	r := get(t, srv.Client(), srv.URL)
	if r.status != 503 {
		t.Errorf("Redis down, hybrid FailClosed: status %d, body %s; want 503", r.status, r.body)
	}
	checkProblem(t, r, 503, ProblemTemporaryReducedCapacity)
}

// TestRetryAfterForCost: a rule of cost 400 under 2000 a minute on the
// hybrid limiter, drained by five requests: the sixth is told to come back
// when 400 tokens are there, 12 s, not when the next one is.
func TestRetryAfterForCost(t *testing.T) {
	redistest.NoLeaks(t)
	l := newHybrid(t, redistest.Standalone(t))
	m, err := New([]Rule{{Name: "tokens", Limiter: l, Limit: hybridlimit.PerMinute(2000), Cost: 400, Key: IP(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m)
	start := time.Now()
	for i := range 5 {
		if r := get(t, srv.Client(), srv.URL); r.status != 200 {
			t.Fatalf("request %d of 5 within the burst: %d", i+1, r.status)
		}
	}
	r := get(t, srv.Client(), srv.URL)
	if r.status != 429 {
		t.Fatalf("sixth request: %d, want 429", r.status)
	}
	// 400 tokens at 2000 a minute take 12 s; the bucket has refilled for
	// at most the time since the first request.
	ra := retryAfter(t, r)
	if lo := (12*time.Second - time.Since(start)).Seconds(); float64(ra) < lo || ra > 12 {
		t.Errorf("Retry-After %d, want the 12 s that 400 tokens take (at least %.1f)", ra, lo)
	}
}
