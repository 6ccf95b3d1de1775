package bench

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
)

// The local benchmarks measure one decision on one limiter shared by
// GOMAXPROCS goroutines (b.RunParallel): the contended hot path. Every
// limit is set so high that every decision admits, so each one takes the
// path that spends, and none of them is a shortcut: x/time/rate is given a
// finite limit, since rate.Inf skips the arithmetic.

// unlimited is the largest limit hybridlimit accepts: 2^40 tokens a second,
// 2^40 at once.
var unlimited = hybridlimit.Limit{Rate: hybridlimit.MaxQuantity, Period: time.Second, Burst: hybridlimit.MaxQuantity}

// BenchmarkLocalBucketAllow measures local.Bucket.Allow: one compare-and-swap
// on one word, with the clock read inside the loop.
func BenchmarkLocalBucketAllow(b *testing.B) {
	lim, err := local.NewBucket(unlimited)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var denied denials
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !lim.Allow() {
				denied.Add(1)
			}
		}
	})
	denied.check(b)
}

// BenchmarkXTimeRateAllow measures golang.org/x/time/rate Limiter.Allow: a
// mutex around float64 token arithmetic, with time.Now read by Allow.
func BenchmarkXTimeRateAllow(b *testing.B) {
	lim := rate.NewLimiter(rate.Limit(float64(hybridlimit.MaxQuantity)), math.MaxInt32)
	b.ReportAllocs()
	var denied denials
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !lim.Allow() {
				denied.Add(1)
			}
		}
	})
	denied.check(b)
}

// BenchmarkUberRatelimitTake measures go.uber.org/ratelimit Limiter.Take
// (the default, atomic int64 limiter). Take has no non-blocking form: it
// always admits, sleeping until the caller's turn. At 10^9 per second
// without slack a turn comes every nanosecond, so Take almost never sleeps
// and this measures its bookkeeping (a clock read and a compare-and-swap)
// rather than a decision that can say no; when two goroutines read the
// same nanosecond, one sleeps for about a nanosecond, which the scheduler
// rounds up. Read it as a floor for that library, not as a like-for-like
// decision.
func BenchmarkUberRatelimitTake(b *testing.B) {
	lim := ratelimit.New(1e9, ratelimit.WithoutSlack)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lim.Take()
		}
	})
}

// BenchmarkTimeSince measures one read of the monotonic clock per call, as
// local.Bucket.Allow makes it (time.Since), on GOMAXPROCS goroutines that
// share nothing: the floor of any limiter that reads the clock once per
// decision. An exact token bucket must, whenever it may be full: the state
// an admission leaves then depends on the instant it was made. x/time/rate
// and uber ratelimit read it twice a decision (time.Now: wall and
// monotonic).
func BenchmarkTimeSince(b *testing.B) {
	base := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var sum time.Duration
		for pb.Next() {
			sum += time.Since(base)
		}
		if sum < 0 {
			b.Error("the monotonic clock went back")
		}
	})
}

// BenchmarkLocalTableAllow measures local.Table.Allow over keys drawn
// uniformly from a table holding them all, so that the cost of finding a
// key that is not in the CPU cache shows, and reports the heap bytes the
// table holds per key (B/key), measured after a garbage collection. The
// table is filled once per count, outside the timed loop.
func BenchmarkLocalTableAllow(b *testing.B) {
	for _, n := range []int{1e6} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(10_000_000+i)
		}
		// A bound above n, so that no key is evicted while filling; the
		// default (2^20) is enforced per shard and would evict a few.
		opt := local.WithMaxKeys(2 * n)
		limit := hybridlimit.PerMinute(1000)
		before := heapInUse()
		tab, err := local.NewTable(opt)
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			if _, err := tab.Allow(k, limit); err != nil {
				b.Fatal(err)
			}
		}
		perKey := float64(heapInUse()-before) / float64(n)
		if got := tab.Len(); got != n {
			b.Fatalf("table holds %d keys, want %d", got, n)
		}
		b.Run("keys="+shortCount(n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
				for pb.Next() {
					if _, err := tab.Allow(keys[r.IntN(n)], limit); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(perKey, "B/key")
		})
		runtime.KeepAlive(tab)
	}
}

// heapInUse returns the bytes of live heap objects after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// shortCount names a count for a benchmark: 1e6 for 1000000.
func shortCount(n int) string {
	e := 0
	for m := n; m >= 10 && m%10 == 0; m /= 10 {
		e++
	}
	if e < 3 {
		return strconv.Itoa(n)
	}
	return strconv.Itoa(n/int(math.Pow10(e))) + "e" + strconv.Itoa(e)
}
