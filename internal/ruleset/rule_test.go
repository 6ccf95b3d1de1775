package ruleset

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
	"github.com/hybridlimit/hybridlimit/sharding"
)

type fake struct{}

func (fake) AllowN(context.Context, string, hybridlimit.Limit, int64) (hybridlimit.Result, error) {
	return hybridlimit.Result{}, nil
}

// TestPolicyWindow checks q and w of RateLimit-Policy: a token bucket
// announces its burst over the time it takes to refill, a window
// algorithm its quota over its period.
func TestPolicyWindow(t *testing.T) {
	// A client that is never used: the window only looks at the algorithm.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	gl := func(alg global.Algorithm) hybridlimit.Limiter {
		l, err := global.New(rdb, alg)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	sharded := func(alg global.Algorithm, layout sharding.Layout) hybridlimit.Limiter {
		g, err := sharding.NewGlobal(rdb, alg, layout, sharding.Fixed(2))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	tests := []struct {
		limiter hybridlimit.Limiter
		limit   hybridlimit.Limit
		q, w    int64
	}{
		{fake{}, hybridlimit.PerMinute(100), 100, 60},
		{fake{}, hybridlimit.PerSecond(10), 10, 1},
		{fake{}, hybridlimit.PerMinute(100).WithBurst(10), 10, 6},
		{fake{}, hybridlimit.Every(100*time.Millisecond, 5), 5, 1},
		{fake{}, hybridlimit.PerHour(1).WithBurst(3), 3, 3 * 3600},
		{gl(global.GCRA), hybridlimit.PerMinute(100).WithBurst(10), 10, 6},
		{gl(global.FixedWindow), hybridlimit.PerMinute(100).WithBurst(10), 10, 60},
		{gl(global.SlidingLog), hybridlimit.PerHour(5), 5, 3600},
		{sharded(global.FixedWindow, sharding.Suffix), hybridlimit.PerMinute(100).WithBurst(10), 10, 60},
		{sharded(global.FixedWindow, sharding.Time), hybridlimit.PerMinute(100).WithBurst(10), 10, 60},
		{sharded(global.GCRA, sharding.Suffix), hybridlimit.PerMinute(100).WithBurst(10), 10, 6},
	}
	for _, tt := range tests {
		r := compile(rules.Rule[int]{Limiter: tt.limiter, Limit: tt.limit})
		if q, w := r.policyOf(tt.limit); q != tt.q || w != tt.w {
			t.Errorf("policyOf(%s, %v) = q=%d w=%d, want q=%d w=%d", rules.Kind(tt.limiter), tt.limit, q, w, tt.q, tt.w)
		}
	}
}

// TestNextToken: the time to a token bucket's next token, from what a
// Result says of it.
func TestNextToken(t *testing.T) {
	ten := hybridlimit.PerMinute(10) // a token every 6s
	for _, tt := range []struct {
		res  hybridlimit.Result
		want time.Duration
	}{
		{hybridlimit.Result{Remaining: 10}, 6 * time.Second},                             // full: a token after the first spent
		{hybridlimit.Result{Remaining: 9, ResetAfter: 6 * time.Second}, 6 * time.Second}, // one spent just now
		{hybridlimit.Result{Remaining: 0, ResetAfter: 60 * time.Second}, 6 * time.Second},
		{hybridlimit.Result{Remaining: 0, ResetAfter: 55 * time.Second}, time.Second}, // 1/6 of a token held
		{hybridlimit.Result{Remaining: 3, ResetAfter: 40 * time.Second}, 4 * time.Second},
		{hybridlimit.Result{Remaining: 0, ResetAfter: 0}, 0}, // does not say
	} {
		if got := nextToken(tt.res, ten); got != tt.want {
			t.Errorf("nextToken(%+v) = %v, want %v", tt.res, got, tt.want)
		}
	}
	huge := hybridlimit.Limit{Rate: 1 << 40, Period: 366 * 24 * time.Hour, Burst: 1 << 40}
	if got := nextToken(hybridlimit.Result{Remaining: 0, ResetAfter: huge.Refill()}, huge); got <= 0 || got > huge.Refill()/(1<<39) {
		t.Errorf("nextToken at the largest limit = %v", got)
	}
}

// peeking is a custom limiter whose Peek answers peek, or fails.
type peeking struct {
	fake
	peek hybridlimit.Result
	err  error
}

func (p peeking) Peek(context.Context, string, hybridlimit.Limit) (hybridlimit.Result, error) {
	return p.peek, p.err
}

// TestUntilMore: a reported rule left with nothing gets a t whatever its
// limiter says, from the decision, a peek, or the limit, and on a denial
// never later than its wait.
func TestUntilMore(t *testing.T) {
	const s = time.Second
	lim := hybridlimit.Limit{Rate: 3, Period: 10 * s, Burst: 3}
	admitted := hybridlimit.Result{Limit: lim, Allowed: true, ResetAfter: 9 * s}
	deniedBy := func(wait time.Duration) hybridlimit.Result {
		return hybridlimit.Result{Limit: lim, RetryAfter: wait, ResetAfter: 9 * s}
	}
	errDown := errors.New("down")
	for _, tt := range []struct {
		name          string
		l             hybridlimit.Limiter
		res           hybridlimit.Result
		cost          int64
		next          time.Duration
		wantRemaining int64
	}{
		{"custom admission, no peek: until full", fake{}, admitted, 1, 9 * s, 0},
		{"custom admission, no peek, no reset: the window", fake{}, hybridlimit.Result{Limit: lim, Allowed: true}, 1, 10 * s, 0},
		{"custom denial of cost 1: its wait", fake{}, deniedBy(4 * s), 1, 4 * s, 0},
		{"custom denial of cost 2, no peek: its wait", fake{}, deniedBy(4 * s), 2, 4 * s, 0},
		{"admission, peek names the wait", peeking{peek: deniedBy(3 * s)}, admitted, 1, 3 * s, 0},
		{"denial of cost 2, peek names a sooner wait for 1", peeking{peek: deniedBy(2 * s)}, deniedBy(5 * s), 2, 2 * s, 0},
		{"denial of cost 2, peek names a later wait: capped", peeking{peek: deniedBy(7 * s)}, deniedBy(5 * s), 2, 5 * s, 0},
		{"admission, peek failed: until full", peeking{err: errDown}, admitted, 1, 9 * s, 0},
		{"admission, peek finds quota: reported", peeking{peek: hybridlimit.Result{Allowed: true, Remaining: 2}}, admitted, 1, -1, 2},
		{"fallback share's denial: its wait, no peek", peeking{peek: deniedBy(time.Hour)},
			hybridlimit.Result{Limit: lim, Source: hybridlimit.SourceFallback, RetryAfter: 2 * s, ResetAfter: 2 * s}, 1, 2 * s, 0},
	} {
		r := compile(rules.Rule[int]{Name: "r", Limiter: tt.l, Limit: lim, Cost: tt.cost})
		p := rules.Policy{Name: "r", Quota: 3, Window: 10, Result: tt.res, Next: r.next(tt.res, lim, tt.cost)}
		r.untilMore(context.Background(), "k", lim, &p)
		if p.Next != tt.next || p.Result.Remaining != tt.wantRemaining {
			t.Errorf("%s: Next %v, Remaining %d; want %v, %d", tt.name, p.Next, p.Result.Remaining, tt.next, tt.wantRemaining)
		}
	}
}

// TestNext: what a decision says of the time until more quota, before any
// peek.
func TestNext(t *testing.T) {
	const s = time.Second
	ten := hybridlimit.PerMinute(10) // a token every 6s
	table, err := local.NewTable()
	if err != nil {
		t.Fatal(err)
	}
	loc, err := rules.NewLocal(table)
	if err != nil {
		t.Fatal(err)
	}
	tokens := compile(rules.Rule[int]{Limiter: loc, Limit: ten})
	custom := compile(rules.Rule[int]{Limiter: fake{}, Limit: ten})
	// A custom limiter that says it is a token bucket is answered as one.
	described := compile(rules.Rule[int]{Limiter: describedFake{hybridlimit.Traits{Kind: "mine", Shape: hybridlimit.ShapeTokens}}, Limit: ten})
	if described.kind != "mine" {
		t.Errorf("kind of a limiter that says it is mine: %q", described.kind)
	}
	for _, tt := range []struct {
		name string
		r    *rule[int]
		res  hybridlimit.Result
		cost int64
		want time.Duration
	}{
		{"token bucket admission", &tokens, hybridlimit.Result{Allowed: true, Remaining: 0, ResetAfter: 60 * s}, 1, 6 * s},
		{"token bucket denial of cost 1: its wait", &tokens, hybridlimit.Result{RetryAfter: 2 * s, ResetAfter: 60 * s}, 1, 2 * s},
		{"token bucket denial of cost 3: the next token", &tokens, hybridlimit.Result{RetryAfter: 17 * s, ResetAfter: 60 * s}, 3, 6 * s},
		{"denial of cost 3 sooner than the next token says: its wait", &tokens, hybridlimit.Result{RetryAfter: 4 * s, ResetAfter: 60 * s}, 3, 4 * s},
		{"custom admission: unknown", &custom, hybridlimit.Result{Allowed: true, ResetAfter: 60 * s}, 1, -1},
		{"custom denial of cost 2: unknown", &custom, hybridlimit.Result{RetryAfter: 4 * s}, 2, -1},
		{"described token bucket admission", &described, hybridlimit.Result{Allowed: true, Remaining: 0, ResetAfter: 60 * s}, 1, 6 * s},
		{"fallback share's denial: its wait", &tokens, hybridlimit.Result{Source: hybridlimit.SourceFallback, RetryAfter: 3 * s, ResetAfter: 3 * s}, 1, 3 * s},
	} {
		if got := tt.r.next(tt.res, ten, tt.cost); got != tt.want {
			t.Errorf("%s: next(%+v, cost %d) = %v, want %v", tt.name, tt.res, tt.cost, got, tt.want)
		}
	}
}

// describedFake is fake with Traits of its own.
type describedFake struct{ t hybridlimit.Traits }

func (describedFake) AllowN(context.Context, string, hybridlimit.Limit, int64) (hybridlimit.Result, error) {
	return hybridlimit.Result{}, nil
}

func (d describedFake) Traits() hybridlimit.Traits { return d.t }
