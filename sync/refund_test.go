package sync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestRefund admits a frozen key's whole budget, gives some back, and
// admits that much again: Redis takes the budget once, the refunded cost
// is spent again locally, and Stats says what was refunded without
// Admitted going down. A refund beyond what the instance admitted, or for
// a key it does not track, gives back nothing.
func TestRefund(t *testing.T) {
	redistest.NoLeaks(t)
	for _, mode := range []hlsync.Mode{hlsync.Reserve, hlsync.Optimistic} {
		t.Run(mode.String(), func(t *testing.T) {
			rdb := redistest.Standalone(t)
			prefix := redistest.Prefix(t)
			l, err := hlsync.New(rdb, hlsync.WithPrefix(prefix), hlsync.WithMode(mode), hlsync.WithLowLimitThreshold(0))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const budget = 10
			limit := frozen(budget)
			admit := func() (n int64) {
				t.Helper()
				for range 2 * budget {
					r, err := l.Allow(ctx, "k", limit)
					if err != nil {
						t.Fatal(err)
					}
					if r.Allowed {
						n++
					}
					if mode == hlsync.Optimistic && !r.Allowed {
						_ = l.Sync(ctx) // Optimistic never waits: a round brings the allowance
					}
				}
				return n
			}
			if n := admit(); n != budget {
				t.Fatalf("admitted %d of a frozen budget of %d", n, budget)
			}
			if err := l.Sync(ctx); err != nil { // report it all
				t.Fatal(err)
			}
			if err := l.Refund(ctx, "k", limit, 4); err != nil {
				t.Fatal(err)
			}
			if err := l.Refund(ctx, "untracked", limit, 4); err != nil {
				t.Fatal(err)
			}
			if n := admit(); n != 4 {
				t.Errorf("after a refund of 4, %d more admitted, want 4", n)
			}
			// More than was admitted since: at most that.
			if err := l.Refund(ctx, "k", limit, budget); err != nil {
				t.Fatal(err)
			}
			s := l.Stats()
			if s.Refunded != 4+budget || s.Admitted < budget+4 {
				t.Errorf("Refunded %d, Admitted %d; want %d and at least %d", s.Refunded, s.Admitted, 4+budget, budget+4)
			}
			if err := l.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if took := taken(t, rdb, prefix, "k", limit, 64); mode == hlsync.Reserve && took != 0 {
				// Everything handed back at Close: what the instance
				// held, the last refund included.
				t.Errorf("Redis still counts %d tokens taken after Close", took)
			}
		})
	}
}

func TestRefundRejectsBadInput(t *testing.T) {
	redistest.NoLeaks(t)
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := hybridlimit.PerSecond(10)
	for _, tc := range []struct {
		name  string
		key   string
		limit hybridlimit.Limit
		cost  int64
		want  error
	}{
		{"zero limit", "k", hybridlimit.Limit{}, 1, hybridlimit.ErrInvalidLimit},
		{"zero cost", "k", ok, 0, hybridlimit.ErrInvalidCost},
		{"cost above burst", "k", ok, 11, hybridlimit.ErrCostExceedsBurst},
		{"empty key", "", ok, 1, hybridlimit.ErrInvalidKey},
	} {
		if err := l.Refund(ctx, tc.key, tc.limit, tc.cost); !errors.Is(err, tc.want) {
			t.Errorf("%s: Refund = %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Refund(ctx, "k", ok, 1); !errors.Is(err, hlsync.ErrClosed) {
		t.Errorf("Refund after Close = %v, want ErrClosed", err)
	}
}

// TestPing checks the start-up check: nil on the standalone server and on
// every master of the cluster; on a Redis that has gone away, an error
// wrapping ErrUnavailable, as New, which waits for nothing, does not say.
func TestPing(t *testing.T) {
	redistest.NoLeaksAfterKill(t)
	ctx := context.Background()
	for _, topo := range redistest.Topologies {
		prefix := redistest.Prefix(t)
		l, err := hlsync.New(topo.Dial(t), hlsync.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Ping(ctx); err != nil {
			t.Errorf("%s: Ping = %v", topo.Name, err)
		}
		if s := l.Stats(); topo.Name == "cluster" && len(s.Nodes) != 3 {
			t.Errorf("cluster: Ping reached %d nodes, want the 3 masters: %+v", len(s.Nodes), s.Nodes)
		}
		redistest.CheckTTLs(t, topo.Dial(t), prefix)
	}
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Stop()
	dead := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	l, err := hlsync.New(dead)
	if err != nil {
		t.Fatalf("New on a dead Redis = %v; it waits for nothing", err)
	}
	if err := l.Ping(ctx); !errors.Is(err, hybridlimit.ErrUnavailable) {
		t.Errorf("Ping on a dead Redis = %v, want ErrUnavailable", err)
	}
}
