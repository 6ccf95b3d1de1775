package sync_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// BenchmarkLimiterAllow measures a decision on a hot key with local
// allowance: the request path the hybrid exists for. The limit is large
// enough that the background loop keeps the allowance topped up.
//
// With striped=false the key's allowance stays in one counter whatever its
// demand (Tuning.StripeDemand +Inf): what the per-CPU counters save.
func BenchmarkLimiterAllow(b *testing.B) {
	for _, striped := range []bool{true, false} {
		b.Run("striped="+strconv.FormatBool(striped), func(b *testing.B) {
			c := redistest.Standalone(b)
			opts := []hlsync.Option{hlsync.WithPrefix(redistest.Prefix(b))}
			if !striped {
				opts = append(opts, hlsync.WithTuning(hlsync.Tuning{StripeDemand: math.Inf(1)}))
			}
			l, err := hlsync.New(c, opts...)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Start(); err != nil {
				b.Fatal(err)
			}
			defer l.Close(context.Background())
			limit := hybridlimit.PerSecond(1 << 40)
			ctx := context.Background()
			if _, err := l.Allow(ctx, "hot", limit); err != nil {
				b.Fatal(err)
			}
			var denied atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r, _ := l.Allow(ctx, "hot", limit)
					if !r.Allowed {
						denied.Add(1)
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
		})
	}
}

// BenchmarkSyncMapBaseline is the obvious design: a sync.Map lookup of one
// hot key plus one atomic add, measured for comparison in the same run.
func BenchmarkSyncMapBaseline(b *testing.B) {
	var m stdsync.Map
	for i := range 1000 {
		m.Store(strconv.Itoa(i), new(atomic.Int64))
	}
	m.Store("hot", new(atomic.Int64))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v, _ := m.Load("hot")
			v.(*atomic.Int64).Add(-1)
		}
	})
}

// clocked returns a limiter on rdb whose clock is clk, with no loop: the
// test runs its rounds. It is closed when the test ends.
func clocked(tb testing.TB, rdb hybridlimit.Redis, clk *clock.Virtual, opts ...hlsync.Option) *hlsync.Limiter {
	tb.Helper()
	l, err := hlsync.New(rdb, append([]hlsync.Option{hlsync.WithClock(clk)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// BenchmarkLimiterSync measures one reconcile round of an instance with
// many active keys: every key spent most of its lease since the last
// round, so every key has a message. The figures to read are ms/round and
// msgs/round.
func BenchmarkLimiterSync(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			c := redistest.Standalone(b)
			clk := clock.New(time.Now())
			l := clocked(b, c, clk, hlsync.WithPrefix(redistest.Prefix(b)),
				hlsync.WithMaxWait(10*time.Second), hlsync.WithRoundTimeout(30*time.Second))
			limit := hybridlimit.PerSecond(1000)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "user:" + strconv.Itoa(i)
			}
			ctx := context.Background()
			spend := func() {
				var wg stdsync.WaitGroup
				for w := range 64 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < n; i += 64 {
							_, _ = l.AllowN(ctx, keys[i], limit, 6)
						}
					}()
				}
				wg.Wait()
			}
			spend()
			b.ReportAllocs()
			b.ResetTimer()
			var total, begin, send time.Duration
			for range b.N {
				b.StopTimer()
				spend()
				clk.Advance(time.Second)
				b.StartTimer()
				start := time.Now()
				r := l.BeginRound()
				begin += time.Since(start)
				t1 := time.Now()
				if err := r.Send(ctx); err != nil {
					b.Fatal(err)
				}
				send += time.Since(t1)
				r.Finish()
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/round")
			b.ReportMetric(float64(begin.Milliseconds())/float64(b.N), "ms/prepare")
			b.ReportMetric(float64(send.Milliseconds())/float64(b.N), "ms/send")
			if info, err := c.Info(ctx, "commandstats").Result(); err == nil {
				for _, line := range strings.Split(info, "\n") {
					if strings.HasPrefix(line, "cmdstat_evalsha:") {
						b.Log(strings.TrimSpace(line))
					}
				}
			}
			b.ReportMetric(float64(l.Stats().Messages)/float64(b.N+1), "msgs/round")
		})
	}
}

// BenchmarkLimiterDenyEmpty measures a decision on a key at its limit:
// Redis reported its bucket empty, and the decision is denied from that
// report without a Redis call, which is most of what a busy limiter
// decides for a key over its limit.
func BenchmarkLimiterDenyEmpty(b *testing.B) {
	c := redistest.Standalone(b)
	clk := clock.New(time.Now())
	l := clocked(b, c, clk, hlsync.WithPrefix(redistest.Prefix(b)))
	limit := hybridlimit.PerHour(100)
	ctx := context.Background()
	for i := 0; ; i++ {
		r, err := l.Allow(ctx, "hot", limit)
		if err != nil {
			b.Fatal(err)
		}
		if !r.Allowed && r.RetryAfter > time.Second {
			break
		}
		if i > 1000 {
			b.Fatal("the key never ran out")
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r, _ := l.Allow(ctx, "hot", limit); r.Allowed {
				b.Error("admitted past the limit")
				return
			}
		}
	})
}

// BenchmarkLimiterSteady measures what syncing costs an instance with
// 100,000 active keys in steady state: every key sees rate decisions a
// second, evenly paced, well under its limit; the clock moves a tick at a
// time and the loop's round runs at each tick, as Start would run it. An
// op is one sync interval (250 ms, the default); run at least 80 (20 s:
// -benchtime 80x), since a quiet key tops up every few seconds. The
// figures to read are round-ms/interval, the wall time of the loop's
// rounds in an interval, and msgs/interval, which counts also the messages
// of decisions that found their key without allowance and fetched.
func BenchmarkLimiterSteady(b *testing.B) {
	for _, rate := range []int{1, 10} {
		b.Run("keys=100000/rate="+strconv.Itoa(rate), func(b *testing.B) {
			const n = 100_000
			c := redistest.Standalone(b)
			clk := clock.New(time.Now())
			const every = 250 * time.Millisecond
			l := clocked(b, c, clk, hlsync.WithPrefix(redistest.Prefix(b)),
				hlsync.WithSyncInterval(every, 0.1), hlsync.WithMaxWait(10*time.Second), hlsync.WithRoundTimeout(30*time.Second))
			limit := hybridlimit.PerSecond(1000)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "user:" + strconv.Itoa(i)
			}
			ctx := context.Background()
			const ticks = 4 // a tick is a quarter interval
			tick := every / ticks
			perTick := float64(rate) * tick.Seconds()
			var step int64
			// interval runs one sync interval: each tick, every key's
			// decisions due by then (key i's are offset by i/n of a
			// period), then the loop's round.
			interval := func() (roundTime time.Duration) {
				for range ticks {
					step++
					for i, key := range keys {
						phase := float64(i) / n
						due := int(float64(step)*perTick+phase) - int(float64(step-1)*perTick+phase)
						for range due {
							_, _ = l.Allow(ctx, key, limit)
						}
					}
					clk.Advance(tick)
					start := time.Now()
					r := l.BeginRound()
					if err := r.Send(ctx); err != nil {
						b.Fatal(err)
					}
					r.Finish()
					roundTime += time.Since(start)
				}
				return roundTime
			}
			for range 120 { // 30 s: past first fetches and lease growth
				interval()
			}
			msgs := l.Stats().Messages
			b.ResetTimer()
			var rounds time.Duration
			for range b.N {
				rounds += interval()
			}
			b.ReportMetric(float64(rounds.Milliseconds())/float64(b.N), "round-ms/interval")
			b.ReportMetric(float64(l.Stats().Messages-msgs)/float64(b.N), "msgs/interval")
		})
	}
}

// BenchmarkRedisMemory measures what the hybrid limiter keeps in Redis per
// key that 8 instances use: each instance decides once on each of 10,000
// keys and closes, and the figure is Redis's used_memory grown, per key.
// An op is the whole run.
func BenchmarkRedisMemory(b *testing.B) {
	c := redistest.Standalone(b)
	ctx := context.Background()
	used := func() int64 {
		for _, line := range strings.Split(c.Info(ctx, "memory").Val(), "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		b.Fatal("no used_memory in INFO memory")
		return 0
	}
	const keys, instances = 10_000, 8
	limit := hybridlimit.PerSecond(1000)
	var perKey float64
	for range b.N {
		prefix := redistest.Prefix(b)
		before := used()
		for i := range instances {
			l, err := hlsync.New(c, hlsync.WithPrefix(prefix), hlsync.WithInstanceID("instance-"+strconv.Itoa(i)))
			if err != nil {
				b.Fatal(err)
			}
			for k := range keys {
				if _, err := l.Allow(ctx, "user:"+strconv.Itoa(k), limit); err != nil {
					b.Fatal(err)
				}
			}
			if err := l.Close(ctx); err != nil {
				b.Fatal(err)
			}
		}
		perKey = float64(used()-before) / keys
	}
	b.ReportMetric(perKey, "redis-B/key")
}
