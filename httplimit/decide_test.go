package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

var limit10 = hybridlimit.PerMinute(10)

// testRule returns a rule of limit10 on a static key, edited.
func testRule(name string, l hybridlimit.Limiter, edit ...func(*Rule)) Rule {
	r := Rule{Name: name, Limiter: l, Limit: limit10, Key: Static("k")}
	for _, e := range edit {
		e(&r)
	}
	return r
}

func TestCheck(t *testing.T) {
	errDown := fmt.Errorf("global: gcra: %w: dial tcp: refused", hybridlimit.ErrUnavailable)
	type row struct {
		name       string
		rules      []Rule
		opts       []Option
		status     int
		retry      time.Duration
		reported   []string // policy names, tightest first
		violated   []string
		remainings []int64
	}
	rule := testRule
	shadow := func(r *Rule) { r.Shadow = true }
	closed := func(r *Rule) { r.OnError = hybridlimit.FailClosed }
	exempt := func(r *Rule) { r.Exempt = func(*http.Request) bool { return true } }
	nokey := func(r *Rule) { r.Key = Header("X-None") }
	tests := []row{
		{name: "no rules", status: 200},
		{
			name:   "least remaining is tightest",
			rules:  []Rule{rule("a", answer(allowed(5, time.Second), nil)), rule("b", answer(allowed(2, time.Second), nil)), rule("c", answer(allowed(2, time.Second), nil))},
			status: 200, reported: []string{"b"}, remainings: []int64{2},
		},
		{
			name:  "all policies, tightest first",
			rules: []Rule{rule("a", answer(allowed(5, time.Second), nil)), rule("b", answer(allowed(2, time.Second), nil)), rule("c", answer(allowed(3, time.Second), nil))},
			opts:  []Option{WithAllPolicies()}, status: 200, reported: []string{"b", "a", "c"}, remainings: []int64{2, 5, 3},
		},
		{
			name:   "the first denial ends the evaluation",
			rules:  []Rule{rule("a", answer(denied(2*time.Second, time.Minute), nil)), rule("b", answer(allowed(0, time.Second), nil)), rule("c", answer(denied(30*time.Second, time.Minute), nil))},
			status: 429, retry: 2 * time.Second, reported: []string{"a"}, violated: []string{"a"}, remainings: []int64{0},
		},
		{
			name:   "a denial after an admission is tightest",
			rules:  []Rule{rule("b", answer(allowed(3, time.Second), nil)), rule("c", answer(denied(30*time.Second, time.Minute), nil))},
			opts:   []Option{WithAllPolicies()},
			status: 429, retry: 30 * time.Second, reported: []string{"c", "b"}, violated: []string{"c"}, remainings: []int64{0, 3},
		},
		{
			name:   "shadow denial passes and is not reported",
			rules:  []Rule{rule("s", answer(denied(time.Second, time.Second), nil), shadow), rule("b", answer(allowed(4, time.Second), nil))},
			status: 200, reported: []string{"b"}, remainings: []int64{4},
		},
		{
			name:   "exempt and keyless rules are skipped",
			rules:  []Rule{rule("x", answer(denied(time.Second, time.Second), nil), exempt), rule("y", answer(denied(time.Second, time.Second), nil), nokey)},
			status: 200,
		},
		{
			name:   "fail open leaves the rule out",
			rules:  []Rule{rule("down", answer(hybridlimit.Result{}, errDown)), rule("b", answer(allowed(4, time.Second), nil))},
			status: 200, reported: []string{"b"}, remainings: []int64{4},
		},
		{
			name:   "fail closed is 503",
			rules:  []Rule{rule("b", answer(allowed(4, time.Second), nil)), rule("down", answer(hybridlimit.Result{}, errDown), closed, func(r *Rule) { r.FailRetry = 3 * time.Second })},
			status: 503, retry: 3 * time.Second, reported: []string{"b"}, remainings: []int64{4},
		},
		{
			name:   "the first rejection decides: a failure",
			rules:  []Rule{rule("down", answer(hybridlimit.Result{}, errDown), closed), rule("b", answer(denied(7*time.Second, time.Minute), nil))},
			status: 503, retry: time.Second,
		},
		{
			name:   "the first rejection decides: a denial",
			rules:  []Rule{rule("b", answer(denied(7*time.Second, time.Minute), nil)), rule("down", answer(hybridlimit.Result{}, errDown), closed)},
			status: 429, retry: 7 * time.Second, reported: []string{"b"}, violated: []string{"b"}, remainings: []int64{0},
		},
		{
			name:   "a FailClosed policy's denial is 503, not a violation",
			rules:  []Rule{rule("b", answer(allowed(4, time.Second), nil)), rule("down", answer(failedClosed(2*time.Second), nil))},
			status: 503, retry: 2 * time.Second, reported: []string{"b"}, remainings: []int64{4},
		},
		{
			name:   "a FailClosed policy's denial waits at least FailRetry",
			rules:  []Rule{rule("down", answer(failedClosed(time.Millisecond), nil), func(r *Rule) { r.FailRetry = 3 * time.Second })},
			status: 503, retry: 3 * time.Second,
		},
		{
			name:   "a denial before a FailClosed policy's denial",
			rules:  []Rule{rule("b", answer(denied(7*time.Second, time.Minute), nil)), rule("down", answer(failedClosed(time.Minute), nil))},
			status: 429, retry: 7 * time.Second, reported: []string{"b"}, violated: []string{"b"}, remainings: []int64{0},
		},
		{
			name:   "a fallback share's denial is a limit's, reported with nothing left",
			rules:  []Rule{rule("b", answer(allowed(4, time.Second), nil)), rule("share", answer(fallbackDenied(2*time.Second), nil))},
			opts:   []Option{WithAllPolicies()},
			status: 429, retry: 2 * time.Second, reported: []string{"share", "b"}, violated: []string{"share"}, remainings: []int64{0, 4},
		},
		{
			name:   "a fallback share's denial keeps its own wait, shorter than FailRetry",
			rules:  []Rule{rule("share", answer(fallbackDenied(200*time.Millisecond), nil), func(r *Rule) { r.FailRetry = 3 * time.Second })},
			status: 429, retry: 200 * time.Millisecond, reported: []string{"share"}, violated: []string{"share"}, remainings: []int64{0},
		},
		{
			name:   "a fallback share's denial that names no wait waits FailRetry",
			rules:  []Rule{rule("share", answer(fallbackDenied(0), nil), func(r *Rule) { r.FailRetry = 3 * time.Second })},
			status: 429, retry: 3 * time.Second, reported: []string{"share"}, violated: []string{"share"}, remainings: []int64{0},
		},
		{
			name:   "a failure policy's admission is not reported",
			rules:  []Rule{rule("open", answer(hybridlimit.Result{Allowed: true, Source: hybridlimit.SourceFallback}, nil)), rule("b", answer(allowed(4, time.Second), nil))},
			status: 200, reported: []string{"b"}, remainings: []int64{4},
		},
		{
			name:   "shadow FailClosed policy's denial passes",
			rules:  []Rule{rule("down", answer(failedClosed(time.Second), nil), shadow)},
			status: 200,
		},
		{
			name:   "shadow fallback share's denial passes",
			rules:  []Rule{rule("share", answer(fallbackDenied(time.Second), nil), shadow)},
			status: 200,
		},
		{
			name:   "shadow failure is open",
			rules:  []Rule{rule("down", answer(hybridlimit.Result{}, errDown), closed, shadow)},
			status: 200,
		},
		{
			name:   "cost above burst is denied without a wait",
			rules:  []Rule{rule("big", answer(allowed(9, 0), nil), func(r *Rule) { r.CostFunc = func(*http.Request) int64 { return 11 } })},
			status: 429, retry: 0, reported: []string{"big"}, violated: []string{"big"}, remainings: []int64{0},
		},
		{
			name:   "free request skips the rule",
			rules:  []Rule{rule("free", answer(denied(time.Second, time.Second), nil), func(r *Rule) { r.CostFunc = func(*http.Request) int64 { return 0 } })},
			status: 200,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(tt.rules, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			d, err := m.Check(httptest.NewRequest("GET", "/", nil))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			var rems []int64
			for _, p := range d.Policies {
				names = append(names, p.Name)
				rems = append(rems, p.Result.Remaining)
			}
			if d.Status != tt.status || d.RetryAfter != tt.retry || !reflect.DeepEqual(names, tt.reported) ||
				!reflect.DeepEqual(d.Violated, tt.violated) || !reflect.DeepEqual(rems, tt.remainings) {
				t.Errorf("Check = status %d retry %v policies %q remaining %v violated %q,\nwant status %d retry %v policies %q remaining %v violated %q",
					d.Status, d.RetryAfter, names, rems, d.Violated, tt.status, tt.retry, tt.reported, tt.remainings, tt.violated)
			}
			if d.Allowed() != (tt.status == 200) {
				t.Errorf("Allowed() = %v with status %d", d.Allowed(), d.Status)
			}
		})
	}
}

func TestCheckCounts(t *testing.T) {
	errDown := fmt.Errorf("x: %w", hybridlimit.ErrUnavailable)
	rule := testRule
	shadow := func(r *Rule) { r.Shadow = true }
	// Each list ends with at most one rule that rejects, since the first
	// rejection ends the evaluation; what admitted before it is refunded.
	lists := [][]Rule{
		{
			rule("ok", answer(allowed(1, 0), nil)),
			rule("shadow", answer(denied(time.Second, 0), nil), shadow),
			rule("open", answer(hybridlimit.Result{}, errDown)),
			rule("exempt", answer(allowed(1, 0), nil), func(r *Rule) { r.Exempt = Methods("GET") }),
			rule("nokey", answer(allowed(1, 0), nil), func(r *Rule) { r.Key = Header("X-None") }),
			rule("skipped", answer(allowed(1, 0), nil), func(r *Rule) { r.Match = Methods("POST") }),
			rule("fallback-shadow", answer(failedClosed(time.Second), nil), shadow),
			rule("share-shadow", answer(fallbackDenied(time.Second), nil), shadow),
		},
		{rule("kept", answer(allowed(1, 0), nil)), rule("given", refunding(allowed(1, 0))), rule("deny", answer(denied(time.Second, 0), nil))},
		{rule("closed", answer(hybridlimit.Result{}, hlsync.ErrClosed), func(r *Rule) { r.OnError = hybridlimit.FailClosed })},
		{rule("fallback", answer(failedClosed(time.Second), nil))},
		{rule("share", answer(fallbackDenied(time.Second), nil))},
	}
	want := map[string]rules.Outcome{"ok": rules.OutcomeAllowed, "deny": rules.OutcomeDenied, "shadow": rules.OutcomeShadowDenied,
		"open": rules.OutcomeErrorOpen, "closed": rules.OutcomeErrorClosed, "exempt": rules.OutcomeExempt, "nokey": rules.OutcomeNoKey,
		"skipped": rules.OutcomeSkipped, "fallback": rules.OutcomeErrorClosed, "fallback-shadow": rules.OutcomeErrorOpen,
		"share": rules.OutcomeDenied, "share-shadow": rules.OutcomeShadowDenied,
		"kept": rules.OutcomeUnrefunded, "given": rules.OutcomeRefunded}
	fates := [][4]uint64{{3, 0, 0, 0}, {0, 3, 0, 0}, {0, 0, 3, 0}, {0, 0, 3, 0}, {0, 3, 0, 0}}
	for i, list := range lists {
		m, err := New(list)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := m.Check(httptest.NewRequest("GET", "/", nil)); err != nil {
				t.Fatal(err)
			}
		}
		s := m.Stats()
		if got := [4]uint64{s.Admitted, s.Limited, s.Unavailable, s.Canceled}; got != fates[i] {
			t.Errorf("list %d: admitted, limited, unavailable, canceled = %v, want %v", i, got, fates[i])
		}
		if s.CheckDuration.Count != 3 || len(s.CheckDuration.Buckets) != len(s.CheckDuration.Bounds) {
			t.Errorf("list %d: check duration %+v, want 3 observations", i, s.CheckDuration)
		}
		for _, rs := range s.Rules {
			for o := range rules.NumOutcomes {
				n := uint64(0)
				if want[rs.Name] == o {
					n = 3
				}
				if rs.Outcomes[o] != n {
					t.Errorf("rule %s: %s = %d, want %d", rs.Name, o, rs.Outcomes[o], n)
				}
			}
			if rs.Limiter != "custom" {
				t.Errorf("rule %s: limiter kind %q, want custom", rs.Name, rs.Limiter)
			}
			switch rs.Name {
			case "open":
				if got := rs.Errors[hybridlimit.ErrorUnavailable]; got != 3 {
					t.Errorf("open: unavailable errors = %d, want 3", got)
				}
			case "closed":
				if got := rs.Errors[hybridlimit.ErrorClosed]; got != 3 {
					t.Errorf("closed: closed errors = %d, want 3", got)
				}
			}
		}
	}
}

func TestCheckCanceled(t *testing.T) {
	l := &fakeLimiter{F: func(string, hybridlimit.Limit, int64) (hybridlimit.Result, error) {
		return hybridlimit.Result{}, context.Canceled
	}}
	m, err := New([]Rule{{Name: "a", Limiter: l, Limit: limit10, Key: Static("k")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	if _, err := m.Check(r); !errors.Is(err, context.Canceled) {
		t.Errorf("Check with a canceled context = %v, want context.Canceled", err)
	}
	w := httptest.NewRecorder()
	m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("next called") })).ServeHTTP(w, r)
	if w.Code != 503 || m.Stats().Canceled != 2 { // Check's and the Handler's
		t.Errorf("canceled request: status %d, Canceled = %d", w.Code, m.Stats().Canceled)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want hybridlimit.ErrorClass
	}{
		{fmt.Errorf("global: %w: x", hybridlimit.ErrUnavailable), hybridlimit.ErrorUnavailable},
		{hlsync.ErrClosed, hybridlimit.ErrorClosed},
		{fmt.Errorf("sync: %w", hybridlimit.ErrInvalidKey), hybridlimit.ErrorInvalid},
		{fmt.Errorf("x: %w", hybridlimit.ErrInvalidLimit), hybridlimit.ErrorInvalid},
		{context.DeadlineExceeded, hybridlimit.ErrorCanceled},
		{errors.New("boom"), hybridlimit.ErrorOther},
	}
	for _, tt := range tests {
		if got := rules.Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestNewRejects(t *testing.T) {
	ok := Rule{Name: "a", Limiter: answer(allowed(1, 0), nil), Limit: limit10, Key: Static("k")}
	tests := []struct {
		name  string
		edit  func(*Rule)
		field string
	}{
		{"no name", func(r *Rule) { r.Name = "" }, "Name"},
		{"long name", func(r *Rule) { r.Name = string(make([]byte, 65)) }, "Name"},
		{"non-ASCII name", func(r *Rule) { r.Name = "é" }, "Name"},
		{"no limiter", func(r *Rule) { r.Limiter = nil }, "Limiter"},
		{"no key", func(r *Rule) { r.Key = nil }, "Key"},
		{"zero limit", func(r *Rule) { r.Limit = hybridlimit.Limit{} }, "Limit"},
		{"cost above burst", func(r *Rule) { r.Cost = 11 }, "Cost"},
		{"negative cost", func(r *Rule) { r.Cost = -1 }, "Cost"},
		{"bad policy", func(r *Rule) { r.OnError = 9 }, "OnError"},
		{"bad unit", func(r *Rule) { r.QuotaUnit = "bytes" }, "QuotaUnit"},
		{"negative fail retry", func(r *Rule) { r.FailRetry = -1 }, "FailRetry"},
	}
	for _, tt := range tests {
		r := ok
		tt.edit(&r)
		_, err := New([]Rule{ok2(), r})
		if !errors.Is(err, rules.ErrInvalidRule) || !containsAll(err.Error(), "rules[1]", tt.field+":") {
			t.Errorf("%s: New = %v, want ErrInvalidRule naming rules[1] and %s", tt.name, err, tt.field)
		}
	}
	if _, err := New([]Rule{ok, ok}); err == nil || !containsAll(err.Error(), "rules[1]", "earlier rule") {
		t.Errorf("New with a duplicate name = %v", err)
	}
	if _, err := New(nil, nil); err == nil {
		t.Errorf("New with a nil option succeeded")
	}
	if _, err := New(nil, WithLogger(nil)); err == nil {
		t.Errorf("New with a nil logger succeeded")
	}
}

func ok2() Rule {
	return Rule{Name: "first", Limiter: answer(allowed(1, 0), nil), Limit: limit10, Key: Static("k")}
}

// TestCostAboveBurstReportsTheQuota sends a request costing more than a
// rule's burst: it is denied with no Retry-After (no wait admits it), and
// the RateLimit field gives the key's quota as it is, untouched: all 10,
// and more only a token's time (6s) after they are spent. It said r=0;t=0
// (nothing left, resets now), which sent clients back at once.
func TestCostAboveBurstReportsTheQuota(t *testing.T) {
	tb, err := local.NewTable()
	if err != nil {
		t.Fatal(err)
	}
	lim, err := rules.NewLocal(tb)
	if err != nil {
		t.Fatal(err)
	}
	limit := hybridlimit.PerMinute(10)
	m, err := New([]Rule{{Name: "up", Limiter: lim, Limit: limit, Key: Static("k"),
		CostFunc: func(*http.Request) int64 { return 11 }}})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	m.Handler(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("POST", "/", nil))
	_, state := fields(t, w.Header())
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "" || len(state) != 1 || state[0].Params["r"] != 10 || state[0].Params["t"] != 6 {
		t.Errorf("status %d, Retry-After %q, RateLimit %q; want 429, none, r=10;t=6", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
	if r, _ := tb.Peek("up|k", time.Now(), limit, 1); r.Remaining != 10 {
		t.Errorf("the denied request spent: %d left of 10", r.Remaining)
	}
}
