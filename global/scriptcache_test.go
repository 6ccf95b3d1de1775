package global

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestScriptFlushUnderLoad empties the script cache of every node ten
// times while goroutines decide on every algorithm, on a private
// standalone server and a private cluster: every EVALSHA after a flush
// meets NOSCRIPT and falls back to EVAL, and no caller sees an error.
// INFO errorstats proves the NOSCRIPT path was taken.
func TestScriptFlushUnderLoad(t *testing.T) {
	redistest.NoLeaks(t)
	for _, top := range []struct {
		name  string
		start func(t *testing.T) (redis.UniversalClient, []*redistest.Server)
	}{
		{"standalone", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			s := redistest.Start(t)
			return s.Client(t), []*redistest.Server{s}
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			cl := redistest.NewCluster(t)
			return cl.Client(t), cl.Nodes
		}},
	} {
		t.Run(top.name, func(t *testing.T) {
			c, nodes := top.start(t)
			p := redistest.Prefix(t)
			var ls []*Limiter
			for _, alg := range algorithms {
				l, err := New(c, alg, WithPrefix(p))
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
			}
			noscript := func() int64 { return redistest.ErrorRepliesOf(t, "NOSCRIPT", nodes) }
			before := noscript()
			limit := hybridlimit.PerMinute(1_000_000)
			var next atomic.Int64
			load := redistest.StartLoad(4, func(ctx context.Context) (bool, error) {
				i := next.Add(1)
				ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				// 64 keys spread the calls over every master.
				r, err := ls[i%int64(len(ls))].Allow(ctx, fmt.Sprintf("k%d", i%64), limit)
				return r.Allowed, err
			})
			const flushes = 10
			for range flushes {
				time.Sleep(30 * time.Millisecond)
				redistest.FlushScripts(t, nodes...)
			}
			time.Sleep(30 * time.Millisecond)
			res := load.Stop()
			n, first, _ := res.Errors()
			admitted, _ := res.Admitted(time.Time{}, time.Time{})
			met := noscript() - before
			t.Logf("%d decisions (%d admitted), %d flushes of %d nodes, %d NOSCRIPT replies, %d errors", len(res.Decisions), admitted, flushes, len(nodes), met, n)
			if n > 0 {
				t.Errorf("%d decisions failed, first: %v", n, first)
			}
			if met < flushes {
				t.Errorf("%d NOSCRIPT replies after %d flushes: the fallback was not exercised", met, flushes)
			}
			noTTL, seen := redistest.KeysWithoutTTL(t, c, p)
			if seen == 0 || len(noTTL) > 0 {
				t.Errorf("keys seen %d, without TTL %v", seen, noTTL)
			}
		})
	}
}
