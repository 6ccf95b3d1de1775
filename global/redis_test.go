package global

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

var algorithms = []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog}

// TestAllowRedisTime runs every algorithm on the Redis clock, on both
// topologies, with keys that need escaping, and checks every key gets a TTL.
func TestAllowRedisTime(t *testing.T) {
	redistest.NoLeaks(t)
	limit := hybridlimit.PerHour(2)
	for _, top := range topologies {
		t.Run(top.Name, func(t *testing.T) {
			c := top.Dial(t)
			p := redistest.Prefix(t)
			for _, alg := range algorithms {
				l, err := New(c, alg, WithPrefix(p))
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range []string{"plain", "{tag}", "a}b{c", "%7Btag%7D", "\x00\xff binary"} {
					for i := range 3 {
						r, err := l.Allow(t.Context(), key, limit)
						if err != nil {
							t.Fatalf("%v: Allow(%q) #%d: %v", alg, key, i, err)
						}
						if r.Allowed != (i < 2) || r.Remaining != max(1-int64(i), 0) {
							t.Errorf("%v: Allow(%q) #%d = %+v, want allowed %v, remaining %d", alg, key, i, r, i < 2, max(1-i, 0))
						}
						if !r.Allowed && (r.RetryAfter <= 0 || r.RetryAfter > 2*time.Hour) {
							t.Errorf("%v: Allow(%q) #%d RetryAfter = %v, want in (0, 2h]", alg, key, i, r.RetryAfter)
						}
						if r.ResetAfter <= 0 || r.ResetAfter > 2*time.Hour {
							t.Errorf("%v: Allow(%q) #%d ResetAfter = %v, want in (0, 2h]", alg, key, i, r.ResetAfter)
						}
					}
					r, err := l.Peek(t.Context(), key, limit)
					if err != nil || r.Allowed || r.Remaining != 0 {
						t.Errorf("%v: Peek(%q) = %+v, %v; want denied, 0 remaining", alg, key, r, err)
					}
				}
			}
			checkTTLs(t, c, p)
		})
	}
}

// TestKeysShareSlot audits key naming: the keys of one decision share a
// slot, and keys that differ only by escaping stay distinct.
func TestKeysShareSlot(t *testing.T) {
	ks, err := hybridlimit.NewKeyspace("p:")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k", "{k}", "}{", "{}", "%7Bk%7D", "\x00"} {
		names, err := keyNames(ks, key, kindSlidingLog, kindSlidingMeta)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := hybridlimit.Slot(names[0]), hybridlimit.Slot(names[1]); a != b {
			t.Errorf("keyNames(%q) = %q in slots %d and %d, want one slot", key, names, a, b)
		}
	}
	a, _ := keyNames(ks, "{k}", kindGCRA)
	b, _ := keyNames(ks, "%7Bk%7D", kindGCRA)
	if a[0] == b[0] {
		t.Errorf("keys {k} and %%7Bk%%7D both name %q", a[0])
	}
	if want := "p:{%7Bk%7D}:gcra2"; a[0] != want {
		t.Errorf("keyNames({k}, gcra2) = %q, want %q", a[0], want)
	}
}

// TestNoScriptRecovered empties the script cache of every server and
// checks the next decisions still succeed.
func TestNoScriptRecovered(t *testing.T) {
	redistest.NoLeaks(t)
	for _, top := range topologies {
		t.Run(top.Name, func(t *testing.T) {
			c := top.Dial(t)
			p := redistest.Prefix(t)
			cc, err := NewConcurrency(c, WithPrefix(p))
			if err != nil {
				t.Fatal(err)
			}
			for round := range 2 {
				flushScripts(t, c)
				for _, alg := range algorithms {
					l, err := New(c, alg, WithPrefix(p))
					if err != nil {
						t.Fatal(err)
					}
					if _, err := l.Allow(t.Context(), "k", hybridlimit.PerMinute(10)); err != nil {
						t.Errorf("round %d: %v after SCRIPT FLUSH: %v", round, alg, err)
					}
				}
				lease, _, err := cc.Acquire(t.Context(), "k", ConcurrencyLimit{MaxInFlight: 5, LeaseTTL: time.Minute})
				if err != nil {
					t.Errorf("round %d: Acquire after SCRIPT FLUSH: %v", round, err)
				}
				flushScripts(t, c)
				if _, err := cc.Release(t.Context(), lease); err != nil {
					t.Errorf("round %d: Release after SCRIPT FLUSH: %v", round, err)
				}
			}
		})
	}
}

func flushScripts(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(t.Context(), func(ctx context.Context, n *redis.Client) error {
			return n.ScriptFlush(ctx).Err()
		})
	default:
		err = c.ScriptFlush(t.Context()).Err()
	}
	if err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	if ok, err := c.ScriptExists(t.Context(), scripts.GCRA.Hash()).Result(); err != nil || ok[0] {
		t.Fatalf("SCRIPT EXISTS after flush = %v, %v", ok, err)
	}
}

// TestUnavailable checks a dead server gives an error wrapping
// ErrUnavailable, and a cancelled context gives ctx.Err().
func TestUnavailable(t *testing.T) {
	redistest.NoLeaks(t)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c, GCRA)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := l.Allow(t.Context(), "k", hybridlimit.PerSecond(1)); !errors.Is(err, hybridlimit.ErrUnavailable) || r.Source != hybridlimit.SourceUnknown {
		t.Errorf("Allow on a dead server = %+v, %v; want ErrUnavailable and no source", r, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := l.Allow(ctx, "k", hybridlimit.PerSecond(1)); err != context.Canceled {
		t.Errorf("Allow with a cancelled context: %v, want context.Canceled", err)
	}
}
