package global

import (
	"strconv"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// BenchmarkLimiterAllow measures one decision per operation against the
// shared standalone server over one client, on one hot key and over many
// keys, with par x GOMAXPROCS goroutines (b.SetParallelism): par=1 shows
// round-trip latency, par=8 the throughput of many callers. The limit
// admits everything, so every decision takes the write path.
func BenchmarkLimiterAllow(b *testing.B) {
	c := redistest.Standalone(b)
	limit := hybridlimit.Limit{Rate: 1 << 30, Period: time.Second, Burst: 1 << 30}
	for _, alg := range algorithms {
		for _, nkeys := range []int{1, 10000} {
			for _, par := range []int{1, 8} {
				name := "alg=" + alg.String() + "/keys=" + strconv.Itoa(nkeys) + "/par=" + strconv.Itoa(par)
				b.Run(name, func(b *testing.B) {
					l, err := New(c, alg, WithPrefix(redistest.Prefix(b)))
					if err != nil {
						b.Fatal(err)
					}
					keys := make([]string, nkeys)
					for i := range keys {
						keys[i] = "user:" + strconv.Itoa(i)
					}
					b.ReportAllocs()
					b.SetParallelism(par)
					b.RunParallel(func(pb *testing.PB) {
						i := 0
						for pb.Next() {
							if _, err := l.Allow(b.Context(), keys[i%nkeys], limit); err != nil {
								b.Error(err)
								return
							}
							i += 7919
						}
					})
				})
			}
		}
	}
}

// BenchmarkLimiterPeek measures the read-only path on one hot key.
func BenchmarkLimiterPeek(b *testing.B) {
	c := redistest.Standalone(b)
	l, err := New(c, GCRA, WithPrefix(redistest.Prefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Peek(b.Context(), "k", hybridlimit.PerSecond(100)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkConcurrencyAcquire measures an acquire and a release per
// operation on one key.
func BenchmarkConcurrencyAcquire(b *testing.B) {
	c := redistest.Standalone(b)
	cc, err := NewConcurrency(c, WithPrefix(redistest.Prefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	limit := ConcurrencyLimit{MaxInFlight: 1 << 20, LeaseTTL: time.Minute}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lease, _, err := cc.Acquire(b.Context(), "k", limit)
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := cc.Release(b.Context(), lease); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
