package httplimit

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
	"github.com/hybridlimit/hybridlimit/sharding"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestUnusableLimitersRefused: limiters that would fail every decision
// (and under the default FailOpen limit nothing) or panic on the first
// request are refused when the rule is made. Each was accepted: a nil
// *global.Limiter and NewLocal(new(local.Table)) made the rule
// unlimited, a nil *sync.Limiter panicked on the first request.
func TestUnusableLimitersRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		l    hybridlimit.Limiter
		want string
	}{
		{"nil", nil, "Limiter: nil"},
		{"nil *global.Limiter", (*global.Limiter)(nil), "Limiter: a nil *global.Limiter"},
		{"nil *sync.Limiter", (*hlsync.Limiter)(nil), "Limiter: a nil *sync.Limiter"},
		{"nil *sharding.Global", (*sharding.Global)(nil), "Limiter: a nil *sharding.Global"},
		{"nil *Local", (*rules.Local)(nil), "Limiter: a nil *rules.Local"},
		{"zero global.Limiter", new(global.Limiter), "Limiter: a *global.Limiter not made by its constructor"},
		{"zero sharding.Global", new(sharding.Global), "Limiter: a *sharding.Global not made by its constructor"},
		{"zero Local", new(rules.Local), "Limiter: a Local not made by NewLocal"},
		{"nil fake", (*fakeLimiter)(nil), "Limiter: a nil *fakelimiter.Limiter"},
	} {
		_, err := New([]Rule{{Name: "r", Limiter: tt.l, Limit: limit10, Key: Static("k")}})
		if !errors.Is(err, rules.ErrInvalidRule) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, want ErrInvalidRule with %q", tt.name, err, tt.want)
		}
	}
	if _, err := rules.NewLocal(nil); err == nil {
		t.Error("NewLocal(nil) succeeded")
	}
	if _, err := rules.NewLocal(new(local.Table)); !errors.Is(err, local.ErrZeroTable) {
		t.Errorf("NewLocal(new(local.Table)) = %v, want local.ErrZeroTable", err)
	}
	var zero rules.Local
	if _, err := zero.AllowN(t.Context(), "k", limit10, 1); err == nil {
		t.Error("zero Local decided")
	}
}

// TestNoKeySaysSo: a rule whose key the requests do not carry (a header
// the clients do not send) finds no key in any of them and limits
// nothing; the first such request of the rule is logged, once, and every
// one is counted as no_key.
func TestNoKeySaysSo(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := New([]Rule{{Name: "per-tenant", Limiter: answer(allowed(1, 0), nil), Limit: limit10, Key: Header("X-Tenant")}}, WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})
	h := m.Handler(mux)
	for range 5 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/items/7", nil))
	}
	if n := strings.Count(logs.String(), "found no key"); n != 1 || !strings.Contains(logs.String(), "rule=per-tenant") ||
		!strings.Contains(logs.String(), `request="GET /items/7"`) {
		t.Errorf("log lines about the missing key: %d, want 1 naming the rule and request:\n%s", n, logs.String())
	}
	if got := m.Stats().Rules[0].Outcomes[rules.OutcomeNoKey]; got != 5 {
		t.Errorf("no_key = %d, want 5", got)
	}
}

// TestLimitFunc gives each request its plan's limit, and treats an invalid
// one as the rule's error.
func TestLimitFunc(t *testing.T) {
	loc := newLocal(t)
	tiers := map[string]hybridlimit.Limit{"free": hybridlimit.PerMinute(2), "pro": hybridlimit.PerMinute(5)}
	m, err := New([]Rule{{
		Name: "per-plan", Limiter: loc, Key: Header("X-User"), OnError: hybridlimit.FailClosed,
		LimitFunc: func(r *http.Request) hybridlimit.Limit { return tiers[r.Header.Get("X-Plan")] },
	}})
	if err != nil {
		t.Fatal(err)
	}
	count := func(user, plan string) (admitted int, last Decision) {
		for range 8 {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-User", user)
			r.Header.Set("X-Plan", plan)
			d, err := m.Check(r)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed() {
				admitted++
			}
			last = d
		}
		return admitted, last
	}
	if n, d := count("ann", "free"); n != 2 || d.Policies[0].Quota != 2 || d.Policies[0].Window != 60 {
		t.Errorf("free: %d admitted, policy %+v; want 2, q=2 w=60", n, d.Policies)
	}
	if n, d := count("bob", "pro"); n != 5 || d.Policies[0].Quota != 5 || d.Policies[0].Window != 60 {
		t.Errorf("pro: %d admitted, policy %+v; want 5, q=5 w=60", n, d.Policies)
	}
	if n, d := count("cy", "unknown"); n != 0 || d.Status != http.StatusServiceUnavailable {
		t.Errorf("no such plan: %d admitted, status %d; want 0 and 503 (FailClosed)", n, d.Status)
	}
	if got := m.Stats().Rules[0].Errors[hybridlimit.ErrorInvalid]; got != 8 {
		t.Errorf("invalid-limit errors = %d, want 8", got)
	}
	if _, err := New([]Rule{{Name: "r", Limiter: loc, Key: Static("k")}}); err == nil {
		t.Error("a rule with neither Limit nor LimitFunc was accepted")
	}
}

// TestHooks: OnLimited and OnError write their own responses, with the
// RateLimit fields and Retry-After already set from the decision.
func TestHooks(t *testing.T) {
	var limitedFor []string
	m, err := New([]Rule{
		{Name: "per-key", Limiter: answer(denied(1500*1e6, 2e9), nil), Limit: limit10, Key: Header("X-Key")},
		{Name: "down", Limiter: answer(hybridlimit.Result{}, hybridlimit.ErrUnavailable), Limit: limit10, Key: Static("k"), OnError: hybridlimit.FailClosed},
	},
		WithOnLimited(func(w http.ResponseWriter, r *http.Request, d *Decision) {
			limitedFor = append(limitedFor, r.Header.Get("X-Key")+" by "+strings.Join(d.Violated, ","))
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte("slow down\n"))
		}),
		WithOnError(func(w http.ResponseWriter, r *http.Request, d *Decision) {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("later\n"))
		}))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("next called") }))
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Key", "k1")
	h.ServeHTTP(w, r)
	_, state := fields(t, w.Header())
	if w.Code != 429 || w.Body.String() != "slow down\n" || w.Header().Get("Retry-After") != "2" || len(state) != 1 ||
		state[0].Params["t"] != 2 || w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("OnLimited response: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
	if len(limitedFor) != 1 || limitedFor[0] != "k1 by per-key" {
		t.Errorf("OnLimited saw %q", limitedFor)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil)) // no key: per-key does not apply, down fails closed
	if w.Code != 503 || w.Body.String() != "later\n" || w.Header().Get("Retry-After") != "1" {
		t.Errorf("OnError response: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
	// WriteHeaders gives a handler rendering Check's decision the same fields.
	d, err := m.Check(r)
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{}
	m.WriteHeaders(hdr, &d)
	if hdr.Get("Retry-After") != "2" || hdr.Get("RateLimit") != `"per-key";r=0;t=2` {
		t.Errorf("WriteHeaders = %v", hdr)
	}
	if _, err := New(nil, WithOnLimited(nil)); err == nil {
		t.Error("a nil OnLimited was accepted")
	}
	if _, err := New(nil, WithOnError(nil)); err == nil {
		t.Error("a nil OnError was accepted")
	}
}

// TestReloadKeepsState swaps the rules while requests run: a rule that
// keeps its name keeps its keys' quotas and counters, a new rule starts,
// a dropped one stops, and an invalid list changes nothing.
func TestReloadKeepsState(t *testing.T) {
	loc := newLocal(t)
	five := Rule{Name: "per-user", Limiter: loc, Limit: hybridlimit.PerHour(5), Key: Header("X-User")}
	m, err := New([]Rule{five, {Name: "old", Limiter: loc, Limit: hybridlimit.PerHour(100), Key: Static("all")}})
	if err != nil {
		t.Fatal(err)
	}
	req := func() *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", "u")
		return r
	}
	check := func() bool {
		d, err := m.Check(req())
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed()
	}
	for range 3 {
		check()
	}
	done := make(chan struct{})
	go func() { // reloads race with the requests below (go test -race)
		defer close(done)
		for range 50 {
			if err := m.Reload([]Rule{five, {Name: "new", Limiter: loc, Limit: hybridlimit.PerHour(100), Key: Static("all")}}); err != nil {
				t.Error(err)
			}
		}
	}()
	admitted := 0
	for range 5 {
		if check() {
			admitted++
		}
	}
	<-done
	if admitted != 2 {
		t.Errorf("%d admitted after the reload, want the 2 per-user had left", admitted)
	}
	s := m.Stats()
	if len(s.Rules) != 2 || s.Rules[0].Name != "per-user" || s.Rules[1].Name != "new" {
		t.Fatalf("rules after reload: %+v", s.Rules)
	}
	if got := s.Rules[0].Outcomes[rules.OutcomeAllowed]; got != 5 {
		t.Errorf("per-user allowed = %d, want 5 across the reload", got)
	}
	if err := m.Reload([]Rule{five, five}); !errors.Is(err, rules.ErrInvalidRule) {
		t.Errorf("Reload with a duplicate = %v", err)
	}
	if s := m.Stats(); len(s.Rules) != 2 || s.Rules[1].Name != "new" {
		t.Errorf("an invalid reload changed the rules: %+v", s.Rules)
	}
}

// TestReset forgets a key under a rule: by the identity its key function
// returns, or by a request carrying it (an API key, which APIKey hashes).
func TestReset(t *testing.T) {
	loc := newLocal(t)
	m, err := New([]Rule{
		{Name: "per-ip", Limiter: loc, Limit: hybridlimit.PerHour(1), Key: IP(nil)},
		{Name: "per-key", Limiter: loc, Limit: hybridlimit.PerHour(1), Key: APIKey("X-API-Key")},
		{Name: "custom", Limiter: answer(allowed(1, 0), nil), Limit: limit10, Key: Static("k")},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := func(ip, key string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = ip + ":1"
		r.Header.Set("X-API-Key", key)
		return r
	}
	status := func(r *http.Request) int {
		d, err := m.Check(r)
		if err != nil {
			t.Fatal(err)
		}
		return d.Status
	}
	ctx := context.Background()
	if status(req("192.0.2.1", "secret")) != 200 || status(req("192.0.2.1", "other")) != 429 {
		t.Fatal("setup: the address's one request did not exhaust it")
	}
	if err := m.Reset(ctx, "per-ip", "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	if got := status(req("192.0.2.1", "secret")); got != 429 {
		t.Errorf("after resetting the address, the spent API key: %d, want 429", got)
	}
	if err := m.ResetRequest(ctx, "per-key", req("0.0.0.0", "secret")); err != nil {
		t.Fatal(err)
	}
	if got := status(req("192.0.2.9", "secret")); got != 200 {
		t.Errorf("after resetting the API key: %d, want 200", got)
	}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{m.Reset(ctx, "nope", "k"), "no rule of that name"},
		{m.Reset(ctx, "custom", "k"), "cannot reset"},
		{m.ResetRequest(ctx, "per-key", httptest.NewRequest("GET", "/", nil)), "finds no key"},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) || !strings.HasPrefix(tt.err.Error(), "httplimit: ") {
			t.Errorf("Reset error %v, want one saying %q", tt.err, tt.want)
		}
	}
}

// TestNilRequest: Check of a nil request is an error, not a panic.
func TestNilRequest(t *testing.T) {
	m, err := New([]Rule{{Name: "r", Limiter: answer(allowed(1, 0), nil), Limit: limit10, Key: Static("k")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Check(nil); err == nil {
		t.Error("Check(nil) succeeded")
	}
}
