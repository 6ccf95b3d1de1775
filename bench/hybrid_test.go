package bench

import (
	"context"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// BenchmarkHybridAllow measures sync.Limiter.Allow, the hybrid, with its
// defaults (Reserve mode, a round every 250ms) and its background loop
// running, in the same dimensions as the exact Redis limiters (see
// globalCases). The Redis cost per decision (redis-cmds/op,
// redis-scripts/op, redis-ns/op) counts everything the limiter sent while
// the timer ran: background rounds, fetches and the presence heartbeat.
//
// The hybrid adapts each key's allowance to its demand, so it is measured
// in its steady state: one limiter per case serves the warm-up (every key
// admitted once, then a second of traffic) and every run the benchmark
// framework makes while it picks b.N.
//
// The limit is 2^40 a second: a hot key here takes tens of millions of
// decisions a second, and a limit below the offered load would measure
// waits for allowance (up to the max wait each in Reserve mode) rather
// than decisions. What Redis does per sync is the same whatever the limit.
//
// Other metrics: B/key, with 10^4 keys, is the heap the limiter holds per
// tracked key, measured after a garbage collection, before the loop starts
// (the client's two pools are filled beforehand, so their buffers are not
// counted); denied/op, decisions refused although the limit is never
// reached (a decision out of local allowance that got none within the max
// wait); waits/op, decisions that waited for a fetch; degraded/op,
// decisions made by the failure policy without Redis, which should be 0 or
// the figure does not measure the hybrid against Redis; warmup-denials,
// first decisions on a key refused during the warm-up.
func BenchmarkHybridAllow(b *testing.B) {
	for _, tc := range globalCases {
		c := client(b)
		lim, err := hlsync.New(c, hlsync.WithPrefix(prefix(b)))
		if err != nil {
			b.Fatal(err)
		}
		keys := benchKeys(tc.keys)
		fillPool(c)
		// The heap per key is read before the loop starts: the keys'
		// first decisions fetch without it, and the buffers of the loop's
		// rounds, garbage or kept for the next, are the limiter's whatever
		// the keys, and move a reading taken while it runs by about 100 B
		// a key from run to run.
		heap0 := heapInUse()
		warmDenials := warmHybrid(b, lim, keys)
		perKey := float64(int64(heapInUse())-int64(heap0)) / float64(len(keys))
		if err := lim.Start(); err != nil {
			b.Fatal(err)
		}
		hammer(lim, keys, tc.par*8, time.Second)

		b.Run(caseName(tc.keys, tc.par), func(b *testing.B) {
			ctx := context.Background()
			before, st0 := readCommandStats(b, c), lim.Stats()
			var denied atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(tc.par)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				cur := newCursor(keys)
				for pb.Next() {
					r, err := lim.Allow(ctx, cur.next(), unlimited)
					if err != nil {
						b.Error(err)
						return
					}
					if !r.Allowed {
						denied.Add(1)
					}
				}
			})
			b.StopTimer()
			cost, st1 := readCommandStats(b, c).since(before), lim.Stats()
			n := float64(b.N)
			b.ReportMetric(n/b.Elapsed().Seconds(), "decisions/s")
			cost.report(b, b.N)
			b.ReportMetric(float64(denied.Load())/n, "denied/op")
			b.ReportMetric(float64(st1.Waits-st0.Waits)/n, "waits/op")
			degraded := st1.FailOpen + st1.FailClosed + st1.FallbackAllowed + st1.FallbackDenied -
				(st0.FailOpen + st0.FailClosed + st0.FallbackAllowed + st0.FallbackDenied)
			b.ReportMetric(float64(degraded)/n, "degraded/op")
			b.ReportMetric(float64(warmDenials), "warmup-denials")
			if len(keys) >= 1e4 {
				b.ReportMetric(perKey, "B/key")
			}
		})

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := lim.Close(ctx); err != nil {
			b.Errorf("Close: %v", err)
		}
		cancel()
	}
}

// warmHybrid makes one admitted decision on every key, from many goroutines
// so that the fetches of new keys are batched, and returns how many
// decisions were denied on the way. A first decision is denied when its
// fetch does not return within the max wait (100ms); it is tried again,
// for up to a minute in all.
func warmHybrid(b *testing.B, lim *hlsync.Limiter, keys []string) int64 {
	b.Helper()
	const workers = 64
	deadline := time.Now().Add(time.Minute)
	var wg stdsync.WaitGroup
	var denials atomic.Int64
	for w := range min(workers, len(keys)) {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				for {
					r, err := lim.Allow(context.Background(), keys[i], unlimited)
					if err != nil {
						b.Error(err)
						return
					}
					if r.Allowed {
						break
					}
					denials.Add(1)
					if time.Now().After(deadline) {
						b.Errorf("warm-up: %q still denied after a minute, the last %+v; limiter stats %+v", keys[i], r, lim.Stats())
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return denials.Load()
}

// fillPool opens every connection the client will pool, in its pool for
// commands and in the one for pipelines (the sync calls' pool, whose
// buffers are 256 KiB a connection), so that their buffers are allocated
// before a heap measurement: they are the client's whatever the keys.
// Each goroutine holds a connection for 50 ms with a BLPOP that times out,
// so twice as many as the two pools hold open every connection they can.
func fillPool(c *redis.Client) {
	pipes := c.Options().PipelinePoolSize
	if pipes == 0 {
		pipes = redis.DefaultPipelinePoolSize
	}
	const key = "bench:fill" // never pushed to
	var wg stdsync.WaitGroup
	// go-redis's BLPop rounds a timeout up to whole seconds.
	blpop := func(c interface {
		Do(context.Context, ...any) *redis.Cmd
	}) {
		c.Do(context.Background(), "BLPOP", key, "0.05")
	}
	for range 2 * (c.Options().PoolSize + pipes) {
		wg.Go(func() { blpop(c) })
		wg.Go(func() {
			_, _ = c.Pipelined(context.Background(), func(p redis.Pipeliner) error {
				blpop(p)
				return nil
			})
		})
	}
	wg.Wait()
}

// hammer makes decisions over keys from n goroutines for d, so that the
// limiter's demand estimates settle before the measurement.
func hammer(lim *hlsync.Limiter, keys []string, n int, d time.Duration) {
	stop := time.Now().Add(d)
	var wg stdsync.WaitGroup
	for range n {
		wg.Go(func() {
			cur := newCursor(keys)
			for i := 0; ; i++ {
				if i%1024 == 0 && time.Now().After(stop) {
					return
				}
				_, _ = lim.Allow(context.Background(), cur.next(), unlimited)
			}
		})
	}
	wg.Wait()
}
