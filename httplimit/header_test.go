package httplimit

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
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
	pol := func(name string, q, w int64, unit string, r hybridlimit.Result) Policy {
		return Policy{Name: name, Quota: q, Window: w, Unit: unit, Result: r}
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
			d:      Decision{Status: 200, Policies: []Policy{pol("per-ip", 100, 60, "", allowed(42, 34100*time.Millisecond))}},
			policy: `"per-ip";q=100;w=60`, state: `"per-ip";r=42;t=35`,
		},
		{
			name:   "denied, legacy",
			d:      Decision{Status: 429, RetryAfter: 1500 * time.Millisecond, Policies: []Policy{pol("k", 10, 1, UnitContentBytes, denied(1500*time.Millisecond, 3*time.Second))}},
			legacy: true,
			policy: `"k";q=10;w=1;qu="content-bytes"`, state: `"k";r=0;t=3`, retry: "2",
			lLimit: "10", lRemain: "0", lReset: "3",
		},
		{
			name:   "sub-second retry rounds up to 1",
			d:      Decision{Status: 429, RetryAfter: time.Microsecond, Policies: []Policy{pol("a", 1, 1, "", denied(time.Microsecond, time.Microsecond))}},
			policy: `"a";q=1;w=1`, state: `"a";r=0;t=1`, retry: "1",
		},
		{
			name: "escaped names, several policies",
			d: Decision{Status: 200, Policies: []Policy{
				pol(`a "quoted" \ name`, 5, 2, "", allowed(1, 0)),
				pol("b", 7, 3600, "", allowed(6, time.Hour)),
			}},
			policy: `"a \"quoted\" \\ name";q=5;w=2, "b";q=7;w=3600`,
			state:  `"a \"quoted\" \\ name";r=1;t=0, "b";r=6;t=3600`,
		},
		{
			name:   "huge values clamp to the Integer range",
			d:      Decision{Status: 200, Policies: []Policy{pol("h", 1<<60, 1<<60, "", allowed(1<<62, 1<<62))}},
			policy: `"h";q=999999999999999;w=999999999999999`, state: `"h";r=999999999999999;t=4611686019`,
		},
		{
			name:  "unavailable without policies",
			d:     Decision{Status: 503, RetryAfter: time.Second},
			retry: "1",
		},
		{
			name:   "denied without a wait has no Retry-After",
			d:      Decision{Status: 429, Policies: []Policy{pol("big", 10, 60, "", denied(0, 0))}},
			policy: `"big";q=10;w=60`, state: `"big";r=0;t=0`,
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

func TestRuleWindow(t *testing.T) {
	// A client that is never used: window only looks at the algorithm.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	gl := func(alg global.Algorithm) Limiter {
		l, err := global.New(rdb, alg)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	sharded := func(alg global.Algorithm, layout sharding.Layout) Limiter {
		g, err := sharding.NewGlobal(rdb, alg, layout, sharding.Fixed(2))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	tests := []struct {
		limiter Limiter
		limit   hybridlimit.Limit
		q, w    int64
	}{
		{answer(allowed(0, 0), nil), hybridlimit.PerMinute(100), 100, 60},
		{answer(allowed(0, 0), nil), hybridlimit.PerSecond(10), 10, 1},
		{answer(allowed(0, 0), nil), hybridlimit.PerMinute(100).WithBurst(10), 10, 6},
		{answer(allowed(0, 0), nil), hybridlimit.Every(100*time.Millisecond, 5), 5, 1},
		{answer(allowed(0, 0), nil), hybridlimit.PerHour(1).WithBurst(3), 3, 3 * 3600},
		{gl(global.GCRA), hybridlimit.PerMinute(100).WithBurst(10), 10, 6},
		{gl(global.FixedWindow), hybridlimit.PerMinute(100).WithBurst(10), 10, 60},
		{gl(global.SlidingLog), hybridlimit.PerHour(5), 5, 3600},
		{sharded(global.FixedWindow, sharding.Suffix), hybridlimit.PerMinute(100).WithBurst(10), 10, 60},
		{sharded(global.FixedWindow, sharding.Time), hybridlimit.PerMinute(100).WithBurst(10), 10, 60},
		{sharded(global.GCRA, sharding.Suffix), hybridlimit.PerMinute(100).WithBurst(10), 10, 6},
	}
	for _, tt := range tests {
		r := Rule{Limiter: tt.limiter, Limit: tt.limit}
		if q, w := r.window(); q != tt.q || w != tt.w {
			t.Errorf("window(%s, %v) = q=%d w=%d, want q=%d w=%d", Kind(tt.limiter), tt.limit, q, w, tt.q, tt.w)
		}
	}
}

// FuzzFields formats arbitrary policies and checks that the fields parse
// as Structured Field Lists that give back the names and numbers.
func FuzzFields(f *testing.F) {
	f.Add("per-ip", int64(100), int64(60), int64(42), int64(35*time.Second), "second", int64(1), int64(0), int64(0))
	f.Add(`a"\b`, int64(0), int64(-1), int64(-5), int64(-1), "", int64(1<<62), int64(1), int64(999))
	f.Add("", int64(1), int64(1), int64(1), int64(1), "x y", int64(2), int64(2), int64(2))
	f.Fuzz(func(t *testing.T, n1 string, q1, w1, r1, reset1 int64, n2 string, q2, r2, reset2 int64) {
		if checkName(n1) != nil || checkName(n2) != nil {
			t.Skip()
		}
		d := Decision{Status: 200, Policies: []Policy{
			{Name: n1, Quota: q1, Window: w1, Result: hybridlimit.Result{Remaining: r1, ResetAfter: time.Duration(reset1)}},
			{Name: n2, Quota: q2, Window: 1, Unit: UnitContentBytes, Result: hybridlimit.Result{Remaining: r2, ResetAfter: time.Duration(reset2)}},
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
				state[i].Params["t"] != sfInt(ceilSeconds(p.Result.ResetAfter)) {
				t.Fatalf("policy %d: parsed %v / %v from %q / %q", i, policy[i], state[i], h.Get(HeaderRateLimitPolicy), h.Get(HeaderRateLimit))
			}
		}
	})
}
