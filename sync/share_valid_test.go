package sync

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
)

// TestFallbackShareValid: share's first branch (the rate divides
// evenly) returns its limit without Validate. 4 per week with a burst of
// 209 refills in 365.75 days, a valid limit; its share between 2 instances,
// 2 per week with a burst of 105, would take 367.5 days, more than
// MaxRefill. The fallback table rejects it, and degraded turns the error
// into a denial: under FallbackLocal every decision on such a key is
// denied while Redis is down, as under FailClosed.
func TestFallbackShareValid(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used
	defer rdb.Close()
	l, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	limit := hybridlimit.Limit{Rate: 4, Period: 7 * 24 * time.Hour, Burst: 209}
	if err := limit.Validate(); err != nil {
		t.Fatal(err)
	}
	l.live.Store(2)
	share := l.share(limit)
	if err := share.Validate(); err != nil {
		t.Errorf("share of %v among 2 = %v: %v", limit, share, err)
	}
	r := l.degraded(l.cfg.clock.Now(), "k", limit, 1)
	if !r.Allowed {
		t.Errorf("FallbackLocal, first decision on a fresh key: %+v; want allowed from its share", r)
	}
}
