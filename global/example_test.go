package global_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
)

// The limiter on a real deployment takes its time from Redis (Allow); this
// example supplies it (AllowAt) so its output is deterministic, and runs on
// miniredis so it needs no server.
func ExampleLimiter_AllowAt() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	l, err := global.New(rdb, global.GCRA, global.WithPrefix("api:"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	limit := hybridlimit.PerSecond(2) // 2 per second, 2 at once
	t0 := time.Unix(1_800_000_000, 0)
	for _, at := range []time.Duration{0, 0, 0, 500 * time.Millisecond} {
		r, err := l.AllowAt(ctx, t0.Add(at), "user:42", limit, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("t0+%v: allowed=%v remaining=%d retry-after=%v\n", at, r.Allowed, r.Remaining, r.RetryAfter)
	}
	// Output:
	// t0+0s: allowed=true remaining=1 retry-after=0s
	// t0+0s: allowed=true remaining=0 retry-after=0s
	// t0+0s: allowed=false remaining=0 retry-after=500ms
	// t0+500ms: allowed=true remaining=0 retry-after=0s
}

// Tokens per minute in front of a model: a request is admitted on an
// estimate of its tokens, and once the reply says how many it used, the
// excess is charged (a shortfall refunded). A reply far past the estimate
// puts the key in debt, which refill repays before the next admission.
func ExampleLimiter_ChargeAt() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	l, err := global.New(rdb, global.TokenBucket)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	tokensPerMinute := hybridlimit.PerMinute(1000)
	t0 := time.Unix(1_800_000_000, 0)
	r, err := l.AllowAt(ctx, t0, "key:7", tokensPerMinute, 100) // the estimate
	if err != nil || !r.Allowed {
		panic(fmt.Sprint(r, err))
	}
	// The reply used 1,500 tokens: 1,400 more than the estimate.
	r, err = l.ChargeAt(ctx, t0, "key:7", tokensPerMinute, 1400)
	if err != nil {
		panic(err)
	}
	fmt.Printf("charged: remaining=%d next token in %v\n", r.Remaining, r.RetryAfter)
	r, err = l.AllowAt(ctx, t0.Add(30*time.Second), "key:7", tokensPerMinute, 100)
	if err != nil {
		panic(err)
	}
	fmt.Printf("30s later: allowed=%v retry-after=%v\n", r.Allowed, r.RetryAfter)
	// Output:
	// charged: remaining=0 next token in 30.06s
	// 30s later: allowed=false retry-after=6s
}

func ExampleConcurrency_AcquireAt() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	c, err := global.NewConcurrency(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	limit := global.ConcurrencyLimit{MaxInFlight: 1, LeaseTTL: 30 * time.Second}
	t0 := time.Unix(1_800_000_000, 0)

	lease, r, _ := c.AcquireAt(ctx, t0, "report", limit)
	fmt.Println("first:", r.Allowed)
	_, r, _ = c.AcquireAt(ctx, t0.Add(time.Second), "report", limit)
	fmt.Println("second:", r.Allowed, "retry after", r.RetryAfter)
	released, _ := c.ReleaseAt(ctx, t0.Add(2*time.Second), lease)
	fmt.Println("released:", released)
	_, r, _ = c.AcquireAt(ctx, t0.Add(2*time.Second), "report", limit)
	fmt.Println("third:", r.Allowed)
	// Output:
	// first: true
	// second: false retry after 29s
	// released: true
	// third: true
}
