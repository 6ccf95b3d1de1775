package bench

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/go-redis/redis_rate/v10"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
)

// The exact global benchmarks make one decision per operation, each one
// Lua script run in Redis, from b.RunParallel goroutines sharing one client
// (go-redis defaults: 10 pooled connections per GOMAXPROCS), against the
// shared loopback server. Both limiters run GCRA. Dimensions:
//
//   - keys: 1 is one hot key; 1e4 spreads the decisions over 10,000 keys.
//   - par: goroutines per GOMAXPROCS (b.SetParallelism). par=1 shows the
//     latency of one round trip, par=16 the throughput of many callers.
//
// The limit, 10^6 a second with a burst of 10^6, is far above what Redis
// can decide, so every decision admits and takes the path that writes.
// It is not the 2^40 a second the local benchmarks use: redis_rate keeps
// time as float64 seconds since 2017, whose resolution there is about 60ns,
// so at 2^40 a second its increment of about a picosecond rounds away and
// it skips its write, which would measure a cheaper path than ours.
var exactLimit = hybridlimit.PerSecond(1_000_000)

// globalCases are the dimensions every exact Redis limiter is measured in.
var globalCases = []struct{ keys, par int }{
	{1, 1},
	{1, 16},
	{1e4, 16},
}

func caseName(keys, par int) string {
	return "keys=" + shortCount(keys) + "/par=" + strconv.Itoa(par)
}

// benchKeys returns n distinct keys.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// cursor hands out keys in turn, from a random starting point, so that
// goroutines spread over the keys. next inlines into the benchmark loop: a
// load and a compare per decision, where a closure would add an indirect
// call that the peers compared in the hot-key benchmarks, which take no
// key at all, do not pay.
type cursor struct {
	keys []string
	i    int
}

func newCursor(keys []string) cursor { return cursor{keys: keys, i: rand.IntN(len(keys))} }

func (c *cursor) next() string {
	k := c.keys[c.i]
	if c.i++; c.i == len(c.keys) {
		c.i = 0
	}
	return k
}

// runRedis runs decide from b.RunParallel at par goroutines per GOMAXPROCS
// over keys, and reports decisions/s and the Redis cost per decision.
func runRedis(b *testing.B, keys []string, par int, decide func(ctx context.Context, key string) error) {
	c := client(b)
	ctx := context.Background()
	for _, k := range keys { // warm: script cached, keys present
		if err := decide(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	before := readCommandStats(b, c)
	b.ReportAllocs()
	b.SetParallelism(par)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		cur := newCursor(keys)
		for pb.Next() {
			if err := decide(ctx, cur.next()); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	readCommandStats(b, c).since(before).report(b, b.N)
}

// BenchmarkGlobalGCRAAllow measures global.Limiter.Allow with GCRA.
func BenchmarkGlobalGCRAAllow(b *testing.B) {
	for _, tc := range globalCases {
		b.Run(caseName(tc.keys, tc.par), func(b *testing.B) {
			lim, err := global.New(client(b), global.GCRA, global.WithPrefix(prefix(b)))
			if err != nil {
				b.Fatal(err)
			}
			var denied denials
			runRedis(b, benchKeys(tc.keys), tc.par, func(ctx context.Context, key string) error {
				r, err := lim.Allow(ctx, key, exactLimit)
				if err == nil && !r.Allowed {
					denied.Add(1)
				}
				return err
			})
			denied.check(b)
		})
	}
}

// BenchmarkRedisRateAllow measures github.com/go-redis/redis_rate/v10
// Limiter.Allow, GCRA in one Lua script per decision. redis_rate puts its
// keys under the fixed prefix "rate:", so the keys carry a random part
// instead.
func BenchmarkRedisRateAllow(b *testing.B) {
	limit := redis_rate.Limit{Rate: int(exactLimit.Rate), Period: exactLimit.Period, Burst: int(exactLimit.Burst)}
	for _, tc := range globalCases {
		b.Run(caseName(tc.keys, tc.par), func(b *testing.B) {
			lim := redis_rate.NewLimiter(client(b))
			keys := benchKeys(tc.keys)
			p := prefix(b)
			for i := range keys {
				keys[i] = p + keys[i]
			}
			var denied denials
			runRedis(b, keys, tc.par, func(ctx context.Context, key string) error {
				r, err := lim.Allow(ctx, key, limit)
				if err == nil && r.Allowed == 0 {
					denied.Add(1)
				}
				return err
			})
			denied.check(b)
		})
	}
}
