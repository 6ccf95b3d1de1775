package ruleset

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
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
		r := compile(Spec[int]{Limiter: tt.limiter, Limit: tt.limit})
		if q, w := r.policyOf(tt.limit); q != tt.q || w != tt.w {
			t.Errorf("policyOf(%s, %v) = q=%d w=%d, want q=%d w=%d", Kind(tt.limiter), tt.limit, q, w, tt.q, tt.w)
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
