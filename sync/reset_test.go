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

// TestReset drains a key from two instances, whole and split in three
// parts, and resets it from one: that one admits at once; the other, which
// Redis told the key is empty, forgets what it knew at its next message and
// admits again within a few intervals; and after the reset the two admit
// no more than the key's budget, once.
func TestReset(t *testing.T) {
	redistest.NoLeaks(t)
	for _, tc := range []struct {
		name   string
		shards int
	}{{"whole", 1}, {"split", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			newClient := clients(t, true)
			prefix := redistest.Prefix(t)
			const interval = 50 * time.Millisecond
			opts := []hlsync.Option{hlsync.WithPrefix(prefix), hlsync.WithSyncInterval(interval, 0.1),
				hlsync.WithLowLimitThreshold(0), hlsync.WithFailurePolicy(hlsync.FailClosed)}
			if tc.shards > 1 {
				opts = append(opts, split(tc.shards))
			}
			ls := newLimiters(t, 2, newClient, opts...)
			const budget = 300
			limit := frozen(budget)
			if admitted, err := hammer(ls, 2, "k", limit, budget, 3*interval); err != nil || sum(admitted) != budget {
				t.Fatalf("drained %v (%v), want %d", admitted, err, budget)
			}
			ctx := context.Background()
			if err := ls[0].Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if r, err := ls[0].Allow(ctx, "k", limit); err != nil || !r.Allowed {
				t.Errorf("the resetting instance, at once: %+v, %v; want admitted", r, err)
			}
			deadline := time.Now().Add(20 * interval)
			for {
				r, err := ls[1].Allow(ctx, "k", limit)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the other instance still denied 20 intervals after the reset: %+v", r)
				}
				time.Sleep(interval / 5)
			}
			after, err := hammer(ls, 2, "k", limit, budget-2, 3*interval)
			if err != nil {
				t.Fatal(err)
			}
			// Two admitted above, the rest here: the new budget once.
			if got := sum(after) + 2; got != budget {
				t.Errorf("admitted %d after the reset, want the budget %d once", got, budget)
			}
			redistest.CheckTTLs(t, newClient().(redis.UniversalClient), prefix)
		})
	}
}

func TestResetRejectsBadInput(t *testing.T) {
	redistest.NoLeaks(t)
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Reset(ctx, ""); !errors.Is(err, hybridlimit.ErrInvalidKey) {
		t.Errorf("Reset(\"\") = %v, want ErrInvalidKey", err)
	}
	if err := l.Reset(ctx, "never-seen"); err != nil {
		t.Errorf("Reset of a key never asked = %v, want nil", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, "k"); !errors.Is(err, hlsync.ErrClosed) {
		t.Errorf("Reset after Close = %v, want ErrClosed", err)
	}
}
