package sync_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// A hybrid limiter on an embedded Redis: three logins an hour per user,
// exact across every instance sharing the Redis, since a limit that low is
// never leased out ahead of demand.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	lim, err := hlsync.New(rdb)
	if err != nil {
		panic(err)
	}
	if err := lim.Start(); err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	ctx := context.Background()
	for i := range 4 {
		r, err := lim.Allow(ctx, "login:alice", hybridlimit.PerHour(3))
		if err != nil {
			panic(err)
		}
		fmt.Printf("attempt %d: allowed=%v remaining=%d\n", i+1, r.Allowed, r.Remaining)
	}
	// Output:
	// attempt 1: allowed=true remaining=2
	// attempt 2: allowed=true remaining=1
	// attempt 3: allowed=true remaining=0
	// attempt 4: allowed=false remaining=0
}
