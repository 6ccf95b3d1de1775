package sharding_test

import (
	"context"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/sharding"
)

// TestGlobalRefund: goroutines admit on a key split 4 ways and give every
// admission back; the key ends with its whole burst, though a refund may
// land on another part than the decision's. An exhausted key given one
// token back admits one more, though every part's denial is remembered.
func TestGlobalRefund(t *testing.T) {
	redistest.NoLeaks(t)
	for _, topo := range topologies {
		for _, alg := range []global.Algorithm{global.GCRA, global.FixedWindow, global.SlidingLog} {
			t.Run(topo.Name+"/"+alg.String(), func(t *testing.T) {
				rdb := topo.Dial(t)
				prefix := redistest.Prefix(t)
				g, err := sharding.NewGlobal(rdb, alg, sharding.Suffix, sharding.Fixed(4), sharding.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				limit := hybridlimit.PerHour(1).WithBurst(203)
				ctx := context.Background()
				var admitted atomic.Int64
				var wg stdsync.WaitGroup
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 40 {
							r, err := g.Allow(ctx, "hot", limit)
							if err != nil {
								t.Error(err)
								return
							}
							if r.Allowed {
								admitted.Add(1)
								if err := g.Refund(ctx, "hot", limit, 1); err != nil {
									t.Error(err)
									return
								}
							}
						}
					}()
				}
				wg.Wait()
				if p, err := g.Peek(ctx, "hot", limit); err != nil || p.Remaining != limit.Burst || admitted.Load() != 320 {
					t.Errorf("%d admitted and given back: Peek = %+v, %v; want all 320 admitted and %d remaining", admitted.Load(), p, err, limit.Burst)
				}
				// Exhaust it, so every part's denial is remembered.
				for range 210 {
					if _, err := g.Allow(ctx, "dry", limit); err != nil {
						t.Fatal(err)
					}
				}
				if r, _ := g.Allow(ctx, "dry", limit); r.Allowed {
					t.Fatalf("exhausted key admitted: %+v", r)
				}
				if err := g.Refund(ctx, "dry", limit, 1); err != nil {
					t.Fatal(err)
				}
				if r, err := g.Allow(ctx, "dry", limit); err != nil || !r.Allowed {
					t.Errorf("after a refund of 1: %+v, %v; want admitted", r, err)
				}
				if r, _ := g.Allow(ctx, "dry", limit); r.Allowed {
					t.Errorf("a refund of 1 admitted 2")
				}
				checkTTLs(t, rdb, prefix)
			})
		}
	}
}

// TestGlobalReset forgets a split key without knowing its layout: a
// Global splitting it 4 ways and one splitting it 3 ways over the same
// prefix both find it full after a Reset by a third that keeps it whole,
// and nothing of it is left in Redis. Those two remember their parts'
// denials, which the Reset cannot reach: they see it once the memory
// lapses, within a second (it lasted the hour the denials named).
func TestGlobalReset(t *testing.T) {
	redistest.NoLeaks(t)
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			rdb := topo.Dial(t)
			prefix := redistest.Prefix(t)
			limit := hybridlimit.PerHour(12)
			ctx := context.Background()
			var gs []*sharding.Global
			for _, s := range []int{4, 3, 1} {
				g, err := sharding.NewGlobal(rdb, global.TokenBucket, sharding.Suffix, sharding.Fixed(s), sharding.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				gs = append(gs, g)
				for range 13 {
					if _, err := g.Allow(ctx, "k", limit); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := gs[2].Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if _, seen := redistest.KeysWithoutTTL(t, rdb, prefix); seen != 0 {
				t.Errorf("%d keys left after Reset", seen)
			}
			fresh, err := sharding.NewGlobal(rdb, global.TokenBucket, sharding.Suffix, sharding.Fixed(4), sharding.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			if r, err := fresh.AllowN(ctx, "k", limit, 3); err != nil || !r.Allowed {
				t.Errorf("a new Global after Reset: %+v, %v; want admitted", r, err)
			}
			time.Sleep(time.Second + 10*time.Millisecond)
			for i, g := range gs {
				if r, err := g.AllowN(ctx, "k", limit, 3); err != nil || !r.Allowed {
					t.Errorf("Global %d after Reset: %+v, %v; want admitted", i, r, err)
				}
			}
			var zero *sharding.Global
			if err := zero.Reset(ctx, "k"); err == nil {
				t.Error("nil Global: Reset succeeded")
			}
		})
	}
}
