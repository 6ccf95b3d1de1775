package httplimit

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/rules"
)

// TestRouteAroundMux is README's service with a rule keyed by route: the
// middleware around the whole ServeMux, mw.Handler(mux), a hybrid limiter
// on a real Redis, and 10 requests to a rule of 2 a minute. The rule found
// no pattern there and limited none of them; now the middleware asks the
// mux for the pattern, and 8 of the 10 are limited. The handlers still
// get the request as the mux routes it: its pattern and path values.
func TestRouteAroundMux(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	quota := newHybrid(t, rdb)
	mw, err := New([]Rule{{Name: "items", Limiter: quota, Limit: hybridlimit.PerMinute(2), Key: Route()}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s", r.Pattern)
	})
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Pattern, r.PathValue("id"))
	})
	srv := httptest.NewServer(mw.Handler(mux))
	t.Cleanup(srv.Close)

	codes := map[int]int{}
	for range 10 {
		r := get(t, srv.Client(), srv.URL+"/items")
		codes[r.status]++
		if r.status == http.StatusOK && string(r.body) != "GET /items" {
			t.Errorf("the handler saw pattern %q, want %q", r.body, "GET /items")
		}
		if r.status == http.StatusTooManyRequests {
			checkProblem(t, r, 429, ProblemQuotaExceeded, "items")
			retryAfter(t, r)
		}
	}
	if codes[200] != 2 || codes[429] != 8 {
		t.Errorf("10 requests to a rule of 2 a minute: %v, want 2 admitted and 8 limited", codes)
	}
	// Another pattern is another key, and the mux still sets the path
	// values for the handler.
	if r := get(t, srv.Client(), srv.URL+"/items/7"); r.status != 200 || string(r.body) != "GET /items/{id} 7" {
		t.Errorf("GET /items/7: %d %q, want 200 %q", r.status, r.body, "GET /items/{id} 7")
	}
	// A request the mux has no route for has no key: the rule does not
	// apply, as inside the mux, and that is no misconfiguration.
	if r := get(t, srv.Client(), srv.URL+"/nothing"); r.status != 404 {
		t.Errorf("GET /nothing: %d, want the mux's 404", r.status)
	}
	out := mw.Stats().Rules[0].Outcomes
	if out[rules.OutcomeAllowed] != 3 || out[rules.OutcomeDenied] != 8 || out[rules.OutcomeNoKey] != 1 || out[rules.OutcomeMisconfigured] != 0 {
		t.Errorf("outcomes %v, want 3 allowed, 8 denied, 1 no_key, 0 misconfigured", out)
	}
}

// muxLike routes as a ServeMux does but is not one: any router with the
// method Handler(*http.Request) (http.Handler, string) is asked for the
// pattern.
type muxLike struct{ *http.ServeMux }

// TestRouteAroundRouter: the pattern is asked of any router that can say
// it, and the request the router receives carries no pattern the
// middleware lent it.
func TestRouteAroundRouter(t *testing.T) {
	mw, err := New([]Rule{{Name: "items", Limiter: newLocal(t), Limit: hybridlimit.PerMinute(2), Key: Route()}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})
	var seen []string
	h := mw.Handler(routerHandler{muxLike{mux}, &seen})
	statuses := ""
	for i := range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", fmt.Sprintf("/items/%d", i), nil))
		statuses += fmt.Sprint(w.Code, " ")
	}
	if statuses != "200 200 429 " {
		t.Errorf("statuses %q, want the route's quota of 2 shared by every item", statuses)
	}
	for _, p := range seen {
		if p != "" {
			t.Errorf("the router received a request with pattern %q, want the one it came with, none", p)
		}
	}
	if len(seen) != 2 {
		t.Errorf("the router served %d requests, want 2", len(seen))
	}
}

// routerHandler is a router that records the pattern of each request it
// receives before routing it.
type routerHandler struct {
	muxLike
	seen *[]string
}

func (h routerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	*h.seen = append(*h.seen, r.Pattern)
	h.muxLike.ServeHTTP(w, r)
}

// TestRouteMisconfiguredSaysSo: a rule keyed by route in a middleware that
// can see no route (it wraps a handler that is not a router, such as a
// logging wrapper around the mux) limits nothing. It is counted as
// misconfigured, not as no_key like a missing header, and its first such
// request is logged at level Error, naming the rule and the fix. A rule whose key is missing from the request itself stays
// no_key, with its own line.
func TestRouteMisconfiguredSaysSo(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mw, err := New([]Rule{
		{Name: "per-route", Limiter: newLocal(t), Limit: limit10, Key: Route()},
		{Name: "per-user-route", Limiter: newLocal(t), Limit: limit10, Key: rules.Join(Header("X-User"), Route())},
		{Name: "per-tenant", Limiter: newLocal(t), Limit: limit10, Key: Header("X-Tenant")},
	}, WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})
	logged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mux.ServeHTTP(w, r) })
	h := mw.Handler(logged) // around a handler that is not a router: no route to see
	for i := range 5 {
		r := httptest.NewRequest("GET", "/items/7", nil)
		if i%2 == 0 {
			r.Header.Set("X-User", "ann")
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	s := mw.Stats()
	for _, tt := range []struct {
		rule                 int
		misconfigured, noKey uint64
	}{
		{0, 5, 0}, // Route() alone: misconfigured on every request
		{1, 3, 2}, // with a user, only the route is missing; without one, the request lacks a key of its own
		{2, 0, 5}, // a header the clients do not send: an ordinary missing key
	} {
		out := s.Rules[tt.rule].Outcomes
		if out[rules.OutcomeMisconfigured] != tt.misconfigured || out[rules.OutcomeNoKey] != tt.noKey || out[rules.OutcomeAllowed] != 0 {
			t.Errorf("%s: outcomes %v, want %d misconfigured, %d no_key, none allowed", s.Rules[tt.rule].Name, out, tt.misconfigured, tt.noKey)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var errs, warns []string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "level=ERROR"):
			errs = append(errs, l)
		case strings.Contains(l, "level=WARN"):
			warns = append(warns, l)
		}
	}
	if len(errs) != 2 || !strings.Contains(errs[0], "rule=per-route") || !strings.Contains(errs[1], "rule=per-user-route") {
		t.Errorf("error lines %q, want one for each route rule", errs)
	}
	for _, l := range errs {
		if !strings.Contains(l, "misconfigured") || !strings.Contains(l, "Middleware.Handler") || !strings.Contains(l, `request="GET /items/7"`) {
			t.Errorf("error line %q does not say the rule is misconfigured, the request and the fix", l)
		}
	}
	if w := strings.Join(warns, "\n"); len(warns) != 2 || !strings.Contains(w, "rule=per-user-route") || !strings.Contains(w, "rule=per-tenant") {
		t.Errorf("warn lines %q, want one no-key line for per-user-route and one for per-tenant", warns)
	}
	// Check, called directly on a request no mux has routed, is no
	// better placed.
	if _, err := mw.Check(httptest.NewRequest("GET", "/items/7", nil)); err != nil {
		t.Fatal(err)
	}
	if got := mw.Stats().Rules[0].Outcomes[rules.OutcomeMisconfigured]; got != 6 {
		t.Errorf("misconfigured after a direct Check = %d, want 6", got)
	}
	// Inside the mux the pattern is known and the rule applies.
	inner := http.NewServeMux()
	inner.Handle("GET /items/{id}", mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	inner.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/items/7", nil))
	if got := mw.Stats().Rules[0].Outcomes[rules.OutcomeAllowed]; got != 1 {
		t.Errorf("inside the mux: allowed = %d, want 1", got)
	}
}
