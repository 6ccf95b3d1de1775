package httplimit

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/rules"
	"github.com/hybridlimit/hybridlimit/sharding"
)

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestWriteFields(t *testing.T) {
	// pol is a policy whose Next, the effective window, is next.
	pol := func(name string, q, w int64, unit string, r hybridlimit.Result, next time.Duration) rules.Policy {
		return rules.Policy{Name: name, Quota: q, Window: w, Unit: unit, Result: r, Next: next}
	}
	tests := []struct {
		name            string
		d               Decision
		legacy          bool
		policy, state   string
		retry           string
		lLimit, lRemain string
		lReset          string
	}{
		{
			name:   "allowed",
			d:      Decision{Status: 200, Policies: []rules.Policy{pol("per-ip", 100, 60, "", allowed(42, 34100*time.Millisecond), 100*time.Millisecond)}},
			policy: `"per-ip";q=100;w=60`, state: `"per-ip";r=42;t=1`,
		},
		{
			name:   "denied, legacy",
			d:      Decision{Status: 429, RetryAfter: 1500 * time.Millisecond, Policies: []rules.Policy{pol("k", 10, 1, rules.UnitContentBytes, denied(1500*time.Millisecond, 3*time.Second), 1500*time.Millisecond)}},
			legacy: true,
			policy: `"k";q=10;w=1;qu="content-bytes"`, state: `"k";r=0;t=2`, retry: "2",
			lLimit: "10", lRemain: "0", lReset: "3",
		},
		{
			name:   "sub-second retry rounds up to 1",
			d:      Decision{Status: 429, RetryAfter: time.Microsecond, Policies: []rules.Policy{pol("a", 1, 1, "", denied(time.Microsecond, time.Microsecond), time.Microsecond)}},
			policy: `"a";q=1;w=1`, state: `"a";r=0;t=1`, retry: "1",
		},
		{
			name: "escaped names, several policies",
			d: Decision{Status: 200, Policies: []rules.Policy{
				pol(`a "quoted" \ name`, 5, 2, "", allowed(1, 0), -1),
				pol("b", 7, 3600, "", allowed(6, time.Hour), time.Hour),
			}},
			policy: `"a \"quoted\" \\ name";q=5;w=2, "b";q=7;w=3600`,
			state:  `"a \"quoted\" \\ name";r=1, "b";r=6;t=3600`,
		},
		{
			name:   "huge values clamp to the Integer range",
			d:      Decision{Status: 200, Policies: []rules.Policy{pol("h", 1<<60, 1<<60, "", allowed(1<<62, 1<<62), 1<<62)}},
			policy: `"h";q=999999999999999;w=999999999999999`, state: `"h";r=999999999999999;t=4611686019`,
		},
		{
			name:  "unavailable without policies",
			d:     Decision{Status: 503, RetryAfter: time.Second},
			retry: "1",
		},
		{
			name:   "denied without a wait has no Retry-After",
			d:      Decision{Status: 429, Policies: []rules.Policy{pol("big", 10, 60, "", denied(0, 0), 6*time.Second)}},
			policy: `"big";q=10;w=60`, state: `"big";r=0;t=6`,
		},
	}
	for _, tt := range tests {
		h := http.Header{}
		writeFields(h, &tt.d, tt.legacy)
		got := map[string]string{
			"policy": h.Get(HeaderRateLimitPolicy), "state": h.Get(HeaderRateLimit), "retry": h.Get(HeaderRetryAfter),
			"limit": h.Get(HeaderLegacyLimit), "remaining": h.Get(HeaderLegacyRemaining), "reset": h.Get(HeaderLegacyReset),
		}
		want := map[string]string{"policy": tt.policy, "state": tt.state, "retry": tt.retry, "limit": tt.lLimit, "remaining": tt.lRemain, "reset": tt.lReset}
		for k := range want {
			if got[k] != want[k] {
				t.Errorf("%s: %s = %q, want %q", tt.name, k, got[k], want[k])
			}
		}
		// And the values parse as Structured Fields, names intact.
		policy, state := fields(t, h)
		for i := range policy {
			if policy[i].Name != tt.d.Policies[i].Name {
				t.Errorf("%s: parsed name %q, want %q", tt.name, policy[i].Name, tt.d.Policies[i].Name)
			}
			if state[i].Params["r"] != sfInt(tt.d.Policies[i].Result.Remaining) {
				t.Errorf("%s: parsed r = %d", tt.name, state[i].Params["r"])
			}
		}
	}
}

// TestRetryAfterOfTheLongestWait answers a denial with the longest wait a
// Duration holds (a custom Limiter may): rounding it up to seconds
// overflowed, and the client was told to retry in 1 second with t=0.
func TestRetryAfterOfTheLongestWait(t *testing.T) {
	never := answer(hybridlimit.Result{RetryAfter: math.MaxInt64, ResetAfter: math.MaxInt64}, nil)
	m, err := New([]Rule{{Name: "a", Limiter: never, Limit: hybridlimit.PerMinute(10), Key: Static("k")}})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	m.Handler(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	want := strconv.FormatInt(int64(math.MaxInt64/time.Second)+1, 10)
	if ra := w.Header().Get("Retry-After"); w.Code != http.StatusTooManyRequests || ra != want {
		t.Errorf("status %d, Retry-After %q, want 429 and %s; RateLimit %s", w.Code, ra, want, w.Header().Get("RateLimit"))
	}
}

// FuzzFields formats arbitrary policies and checks that the fields parse
// as Structured Field Lists that give back the names and numbers.
func FuzzFields(f *testing.F) {
	f.Add("per-ip", int64(100), int64(60), int64(42), int64(35*time.Second), "second", int64(1), int64(0), int64(0))
	f.Add(`a"\b`, int64(0), int64(-1), int64(-5), int64(-1), "", int64(1<<62), int64(1), int64(999))
	f.Add("", int64(1), int64(1), int64(1), int64(1), "x y", int64(2), int64(2), int64(2))
	f.Fuzz(func(t *testing.T, n1 string, q1, w1, r1, reset1 int64, n2 string, q2, r2, reset2 int64) {
		if rules.CheckName(n1) != nil || rules.CheckName(n2) != nil {
			t.Skip()
		}
		d := Decision{Status: 200, Policies: []rules.Policy{
			{Name: n1, Quota: q1, Window: w1, Result: hybridlimit.Result{Remaining: r1}, Next: time.Duration(reset1)},
			{Name: n2, Quota: q2, Window: 1, Unit: rules.UnitContentBytes, Result: hybridlimit.Result{Remaining: r2}, Next: time.Duration(reset2)},
		}}
		h := http.Header{}
		writeFields(h, &d, true)
		policy, state := fields(t, h)
		if len(policy) != 2 {
			t.Fatalf("%d policies in %q", len(policy), h.Get(HeaderRateLimitPolicy))
		}
		for i, p := range d.Policies {
			if policy[i].Name != p.Name || policy[i].Params["q"] != sfInt(p.Quota) || policy[i].Params["w"] != sfInt(p.Window) ||
				policy[i].Unit != p.Unit || state[i].Params["r"] != sfInt(p.Result.Remaining) ||
				p.Next >= 0 && state[i].Params["t"] != sfInt(ceilSeconds(p.Next)) {
				t.Fatalf("policy %d: parsed %v / %v from %q / %q", i, policy[i], state[i], h.Get(HeaderRateLimitPolicy), h.Get(HeaderRateLimit))
			}
		}
	})
}

// TestFieldsFollowDraft checks the fields of real decisions against
// draft-ietf-httpapi-ratelimit-headers-11, field by field: q the quota, w
// its window, r the available quota, t the effective window (the seconds
// until more quota is available: for a token bucket its next token, for a
// fixed window its end; left out where a sliding window's admission cannot
// say), and Retry-After, on a rejection, not before the end of t. t was
// the time until the bucket is full: a drained 10-a-minute key said t=60
// next to Retry-After: 6, and a sliding window of 3 per 10s said t=19 with
// w=10.
func TestFieldsFollowDraft(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	gl := exactLimiters(t, rdb, p)
	loc := newLocal(t)
	// want is one response's fields; t < 0 means no t parameter.
	type want struct {
		status     int
		q, w, r, t int64
		retry      string
	}
	tenPerMin := hybridlimit.PerMinute(10)
	threePer10s := hybridlimit.Limit{Rate: 3, Period: 10 * time.Second, Burst: 3}
	for _, tt := range []struct {
		name  string
		l     hybridlimit.Limiter
		limit hybridlimit.Limit
		steps []want
	}{
		{"local token bucket", loc, tenPerMin, append(repeat(10, func(i int) want { return want{200, 10, 60, int64(9 - i), 6, ""} }),
			want{429, 10, 60, 0, 6, "6"})},
		{"gcra", gl(global.GCRA), tenPerMin, append(repeat(10, func(i int) want { return want{200, 10, 60, int64(9 - i), 6, ""} }),
			want{429, 10, 60, 0, 6, "6"})},
		{"token bucket, a token every 2s", gl(global.TokenBucket), hybridlimit.Every(2*time.Second, 2), []want{
			{200, 2, 4, 1, 2, ""}, {200, 2, 4, 0, 2, ""}, {429, 2, 4, 0, 2, "2"}}},
		{"sliding window", gl(global.SlidingWindow), threePer10s, []want{
			{200, 3, 10, 2, -1, ""}, {200, 3, 10, 1, -1, ""}, {200, 3, 10, 0, -2, ""}, {429, 3, 10, 0, -2, "-2"}}},
		{"sliding log", gl(global.SlidingLog), threePer10s, []want{
			{200, 3, 10, 2, -1, ""}, {200, 3, 10, 1, -1, ""}, {200, 3, 10, 0, -2, ""}, {429, 3, 10, 0, -2, "-2"}}},
		{"fixed window", gl(global.FixedWindow), threePer10s, []want{
			{200, 3, 10, 2, -2, ""}, {200, 3, 10, 1, -2, ""}, {200, 3, 10, 0, -2, ""}, {429, 3, 10, 0, -2, "-2"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New([]Rule{{Name: "r", Limiter: tt.l, Limit: tt.limit, Key: Static(tt.name)}})
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for i, w := range tt.steps {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				policy, state := fields(t, rec.Header())
				if rec.Code != w.status || len(policy) != 1 {
					t.Fatalf("request %d: %d with %v, want %d and one policy", i, rec.Code, rec.Header(), w.status)
				}
				got := want{rec.Code, policy[0].Params["q"], policy[0].Params["w"], state[0].Params["r"], -1, rec.Header().Get("Retry-After")}
				if v, ok := state[0].Params["t"]; ok {
					got.t = v
				}
				// -2: a time the reply names (a window's end, a sliding
				// window's wait), seconds from now, under 20: t and
				// Retry-After must then agree with each other.
				if w.t == -2 {
					if got.t < 1 || got.t > 20 {
						t.Errorf("request %d: t=%d, want 1 to 20", i, got.t)
					}
					w.t = got.t
				}
				if w.retry == "-2" {
					if got.retry != strconv.FormatInt(got.t, 10) {
						t.Errorf("request %d: Retry-After %q with t=%d, want them equal", i, got.retry, got.t)
					}
					w.retry = got.retry
				}
				if got != w {
					t.Errorf("request %d: fields %+v, want %+v\n  %s: %s\n  %s: %s", i, got, w,
						HeaderRateLimitPolicy, rec.Header().Get(HeaderRateLimitPolicy), HeaderRateLimit, rec.Header().Get(HeaderRateLimit))
				}
			}
		})
	}
}

func repeat[T any](n int, f func(i int) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// TestTWhenNothingLeft: whenever a response says r=0 it carries t, for
// every algorithm and limiter kind, on a real Redis where one is needed;
// and a 429's Retry-After is never earlier than t, its own or the one the
// admission before it sent. A sliding window or log sent r=0 with no t on
// the admission that took the last of the quota. Each row spends its
// limit, 3 (or 4) per 10 s, until the first denial.
func TestTWhenNothingLeft(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	gl := exactLimiters(t, rdb, p)
	sharded := func(alg global.Algorithm, layout sharding.Layout) hybridlimit.Limiter {
		g, err := sharding.NewGlobal(rdb, alg, layout, sharding.Fixed(2), sharding.WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	threePer10s := hybridlimit.Limit{Rate: 3, Period: 10 * time.Second, Burst: 3}
	fourPer10s := hybridlimit.Limit{Rate: 4, Period: 10 * time.Second, Burst: 4}
	// windowLike admits its burst, saying what is left and when it is
	// full, then denies with a wait: a custom limiter that says nothing of
	// when its next unit comes, and cannot peek.
	windowLike := func() hybridlimit.Limiter {
		n := int64(0)
		return &fakeLimiter{F: func(_ string, l hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
			if n+cost > l.Burst {
				return hybridlimit.Result{Limit: l, RetryAfter: 4 * time.Second, ResetAfter: 10 * time.Second}, nil
			}
			n += cost
			return hybridlimit.Result{Limit: l, Allowed: true, Remaining: l.Burst - n, ResetAfter: 10 * time.Second}, nil
		}}
	}
	for _, tt := range []struct {
		name  string
		l     hybridlimit.Limiter
		limit hybridlimit.Limit
		cost  int64
		// exact: a limiter of this module, whose 429 must not name an
		// earlier time than the t of the admission before it.
		exact bool
	}{
		{"local token bucket", newLocal(t), threePer10s, 1, true},
		{"hybrid", newHybrid(t, rdb), threePer10s, 1, true},
		{"token bucket", gl(global.TokenBucket), threePer10s, 1, true},
		{"token bucket, cost 2", gl(global.TokenBucket), fourPer10s, 2, true},
		{"gcra", gl(global.GCRA), threePer10s, 1, true},
		{"fixed window", gl(global.FixedWindow), threePer10s, 1, true},
		{"sliding window", gl(global.SlidingWindow), threePer10s, 1, true},
		{"sliding window, cost 2", gl(global.SlidingWindow), fourPer10s, 2, true},
		{"sliding log", gl(global.SlidingLog), threePer10s, 1, true},
		{"sliding log, cost 2", gl(global.SlidingLog), fourPer10s, 2, true},
		{"sharded sliding window", sharded(global.SlidingWindow, sharding.Suffix), fourPer10s, 1, true},
		{"sharded fixed window by time", sharded(global.FixedWindow, sharding.Time), threePer10s, 1, true},
		{"custom, no peek", windowLike(), threePer10s, 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New([]Rule{{Name: "r", Limiter: tt.l, Limit: tt.limit, Cost: tt.cost, Key: Static(tt.name)}})
			if err != nil {
				t.Fatal(err)
			}
			var lastT time.Time // when the last admission with r=0 said more quota comes
			for i := range 8 {
				before := time.Now()
				d, err := m.Check(httptest.NewRequest("GET", "/", nil))
				after := time.Now()
				if err != nil {
					t.Fatal(err)
				}
				h := http.Header{}
				m.WriteHeaders(h, &d)
				_, state := fields(t, h)
				if len(state) != 1 {
					t.Fatalf("request %d: %d policies reported, want 1", i, len(state))
				}
				r := state[0].Params["r"]
				secs, ok := state[0].Params["t"]
				if r == 0 && !ok {
					t.Errorf("request %d: status %d, RateLimit %q: r=0 without t", i, d.Status, h.Get(HeaderRateLimit))
				}
				if r == 0 && ok && tt.exact && secs < 1 {
					t.Errorf("request %d: RateLimit %q: more quota in %ds, right after it ran out", i, h.Get(HeaderRateLimit), secs)
				}
				if d.Allowed() {
					if r == 0 {
						lastT = before.Add(d.Policies[0].Next)
					}
					continue
				}
				ra, err := strconv.ParseInt(h.Get(HeaderRetryAfter), 10, 64)
				if err != nil || ra < secs {
					t.Errorf("request %d: Retry-After %q with t=%d: earlier than t", i, h.Get(HeaderRetryAfter), secs)
				}
				// The denial's wait ends no earlier than the admission's
				// t said more would come (after, before: the bounds of
				// each decision's own time).
				if tt.exact && !lastT.IsZero() && after.Add(d.RetryAfter+time.Millisecond).Before(lastT) {
					t.Errorf("request %d: Retry-After ends %v before the t of the admission before it", i, lastT.Sub(after.Add(d.RetryAfter)))
				}
				if lastT.IsZero() {
					t.Errorf("request %d: denied, and no admission before it said r=0", i)
				}
				return
			}
			t.Fatal("no denial in 8 requests")
		})
	}
}

// exactLimiters returns a function making exact limiters of an algorithm
// on rdb under prefix.
func exactLimiters(t *testing.T, rdb hybridlimit.Redis, prefix string) func(global.Algorithm) hybridlimit.Limiter {
	return func(alg global.Algorithm) hybridlimit.Limiter {
		l, err := global.New(rdb, alg, global.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}
