package sync_test

import (
	"context"
	"strconv"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// BenchmarkLimiterAllow measures a decision on a hot key with local
// allowance: the request path the hybrid exists for. The limit is large
// enough that the background loop keeps the allowance topped up.
func BenchmarkLimiterAllow(b *testing.B) {
	c := redistest.Standalone(b)
	l, err := hlsync.New(c, hlsync.WithPrefix(redistest.Prefix(b)))
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

// fakeClock is a clock the benchmark moves by hand.
type fakeClock struct{ now atomic.Int64 }

func (c *fakeClock) Now() time.Time { return time.Unix(0, c.now.Load()) }

// BenchmarkLimiterSync measures one reconcile round of an instance with
// many active keys: every key spent most of its lease since the last
// round, so every key has a message. The figures to read are ms/round and
// msgs/round.
func BenchmarkLimiterSync(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			c := redistest.Standalone(b)
			clk := &fakeClock{}
			clk.now.Store(time.Now().UnixNano())
			l, err := hlsync.New(c, hlsync.WithPrefix(redistest.Prefix(b)), hlsync.WithClock(clk),
				hlsync.WithMaxWait(10*time.Second), hlsync.WithRoundTimeout(30*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close(context.Background())
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
				clk.now.Add(int64(time.Second))
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
	clk := &fakeClock{}
	clk.now.Store(time.Now().UnixNano())
	l, err := hlsync.New(c, hlsync.WithPrefix(redistest.Prefix(b)), hlsync.WithClock(clk))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
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
