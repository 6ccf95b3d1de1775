package sharding_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/sharding"
)

// TestGlobalCharge charges a key split four ways three bursts: every part
// takes its share into debt, so no part admits, and each part's state is
// what a whole key of its limit charged its share would hold (Peek of
// each part through a plain global.Limiter on the parts' keyspace). A
// negative charge is refused, nothing changed.
func TestGlobalCharge(t *testing.T) {
	redistest.NoLeaks(t)
	for _, topo := range topologies {
		for _, alg := range []global.Algorithm{global.GCRA, global.TokenBucket, global.FixedWindow, global.SlidingWindow, global.SlidingLog} {
			t.Run(topo.Name+"/"+alg.String(), func(t *testing.T) {
				rdb := topo.Dial(t)
				prefix := redistest.Prefix(t)
				g, err := sharding.NewGlobal(rdb, alg, sharding.Suffix, sharding.Fixed(4), sharding.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				limit := hybridlimit.PerHour(1).WithBurst(203) // parts of 51, 51, 51, 50
				ctx := context.Background()
				if _, err := g.Charge(ctx, "k", limit, -1); !errors.Is(err, hybridlimit.ErrInvalidCost) {
					t.Errorf("Charge(-1) = %v, want ErrInvalidCost", err)
				}
				r, err := g.Charge(ctx, "k", limit, 3*203)
				if err != nil {
					t.Fatal(err)
				}
				if !r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
					t.Errorf("three bursts charged: %+v; want allowed, nothing left, a wait", r)
				}
				if d, err := g.Allow(ctx, "k", limit); err != nil || d.Allowed {
					t.Errorf("after the charge: %+v, %v; want denied", d, err)
				}
				// Each part was charged its share: 153, 152, 152, 152.
				parts, err := global.New(rdb, alg, global.WithPrefix(prefix+"sh:"))
				if err != nil {
					t.Fatal(err)
				}
				for j, share := range []int64{153, 152, 152, 152} {
					part := sharding.Quota(limit, j, 4)
					if alg == global.GCRA || alg == global.TokenBucket {
						part = sharding.Part(limit, j, 4)
					}
					p, err := parts.Peek(ctx, sharding.PartKey("k", j, 4), part)
					if err != nil {
						t.Fatal(err)
					}
					if p.Allowed {
						t.Errorf("part %d (burst %d) charged %d admits: %+v", j, part.Burst, share, p)
					}
					// A token bucket full before the charge is full again
					// once its share has refilled.
					if perToken := part.Period / time.Duration(part.Rate); (alg == global.GCRA || alg == global.TokenBucket) &&
						(p.ResetAfter > time.Duration(share)*perToken || p.ResetAfter < time.Duration(share)*perToken-time.Minute) {
						t.Errorf("part %d charged %d: full again in %v, want %v", j, share, p.ResetAfter, time.Duration(share)*perToken)
					}
				}
			})
		}
	}
}
