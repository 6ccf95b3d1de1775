package local_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
)

func ExampleBucket() {
	// Ten a second, at most three at once.
	b, err := local.NewBucket(hybridlimit.Limit{Rate: 10, Period: time.Second, Burst: 3})
	if err != nil {
		panic(err)
	}
	t0 := time.Now()
	for range 4 {
		r, _ := b.TakeN(t0, 1)
		fmt.Printf("t0: allowed=%v remaining=%d retry-after=%v\n", r.Allowed, r.Remaining, r.RetryAfter)
	}
	r, _ := b.TakeN(t0.Add(100*time.Millisecond), 1)
	fmt.Printf("t0+100ms: allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Output:
	// t0: allowed=true remaining=2 retry-after=0s
	// t0: allowed=true remaining=1 retry-after=0s
	// t0: allowed=true remaining=0 retry-after=0s
	// t0: allowed=false remaining=0 retry-after=100ms
	// t0+100ms: allowed=true remaining=0
}

func ExampleBucket_Allow() {
	// One an hour: the second call now is refused.
	b, err := local.NewBucket(hybridlimit.PerHour(1))
	if err != nil {
		panic(err)
	}
	fmt.Println(b.Allow(), b.Allow())
	// Output: true false
}

func ExampleTable() {
	// One table, any number of keys, the limit given on every call.
	t, err := local.NewTable(local.WithMaxKeys(100_000))
	if err != nil {
		panic(err)
	}
	perUser := hybridlimit.PerMinute(2)
	t0 := time.Now()
	for _, user := range []string{"alice", "alice", "alice", "bob"} {
		r, err := t.AllowN(user, t0, perUser, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: allowed=%v remaining=%d retry-after=%v\n", user, r.Allowed, r.Remaining, r.RetryAfter)
	}
	_, err = t.AllowN("", t0, perUser, 1)
	fmt.Println(errors.Is(err, hybridlimit.ErrInvalidKey))
	// Output:
	// alice: allowed=true remaining=1 retry-after=0s
	// alice: allowed=true remaining=0 retry-after=0s
	// alice: allowed=false remaining=0 retry-after=30s
	// bob: allowed=true remaining=1 retry-after=0s
	// true
}

func ExampleCore() {
	// A simulator drives a Core with its own clock, in nanoseconds.
	c, err := local.NewCore(hybridlimit.Limit{Rate: 2, Period: time.Second, Burst: 2}, 0)
	if err != nil {
		panic(err)
	}
	for _, at := range []time.Duration{0, 0, 0, 500 * time.Millisecond} {
		r, _ := c.Take(int64(at), 1)
		fmt.Printf("%v: allowed=%v remaining=%d retry-after=%v\n", at, r.Allowed, r.Remaining, r.RetryAfter)
	}
	// Output:
	// 0s: allowed=true remaining=1 retry-after=0s
	// 0s: allowed=true remaining=0 retry-after=0s
	// 0s: allowed=false remaining=0 retry-after=500ms
	// 500ms: allowed=true remaining=0 retry-after=0s
}
