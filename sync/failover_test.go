package sync_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestFailover runs three Reserve limiters, two goroutines each, on one
// key of a private 3+3 cluster (cluster-node-timeout 500ms) while the
// master of the key's slot (a) hands over to its replica with CLUSTER
// FAILOVER and (b) is killed with SIGKILL. The limiters fail closed, so
// everything they admit was granted by Redis; each phase ends with Close,
// which hands back unused allowance, and then the tokens admitted plus
// those left in the bucket, less the budget, is the over-admission the
// failover caused.
//
// Bounds asserted:
//   - (a) is loss-free (the replica catches up before the swap): the
//     over-admission is 0. The old master holds writes during the handover,
//     so rounds may time out and the breaker open for about as long as the
//     failover takes (asserted: at most that plus 10 intervals).
//     The new master starts with an empty script cache: the pipelined
//     EVALSHA meets NOSCRIPT and is sent again with EVAL.
//   - (b) loses the writes the dead master acknowledged but had not yet
//     streamed to its replica. A ledger that survives restates the
//     instance's total on the next message, so the new master debits the
//     grant again; only a grant whose ledger was created in the lost
//     moments is forgotten. Each instance loses at most the grants of its
//     last round before the kill, a lease of about k=2 intervals of its
//     demand: the test asserts the over-admission is at most what all
//     instances admitted in the 4 intervals before the kill, plus their
//     minimum leases. No decision returns an error, no count goes
//     negative, and every limiter syncs again within a few seconds of the
//     promotion.
func TestFailover(t *testing.T) {
	defaultBuildOnly(t)
	redistest.NoLeaksAfterKill(t)
	cl := redistest.NewClusterWith(t, "cluster-node-timeout 500")
	prefix := redistest.Prefix(t)
	const (
		key      = "victim"
		burst    = 1_000_000
		n        = 3
		interval = 50 * time.Millisecond
	)
	limit := frozen(burst)
	newClient := func() hybridlimit.Redis {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, ReadTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	probe, err := hlsync.New(newClient(), hlsync.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	bucket, _ := probe.Keys(key)
	slot := hybridlimit.Slot(bucket)

	var negative atomic.Int64
	// phase starts n limiters under load, injects the fault, keeps the
	// load on for 300ms after recover returns, and closes the limiters.
	phase := func(name string, fault func(ls []*hlsync.Limiter) time.Time) (admitted int64, faultAt time.Time, ls []*hlsync.Limiter, res redistest.LoadResult) {
		ls = newLimiters(t, n, newClient, hlsync.WithPrefix(prefix), hlsync.WithSyncInterval(interval, 0.1),
			hlsync.WithFailurePolicy(hybridlimit.FailClosed),
			// Leases ahead of demand, as a limit this high would use if it
			// refilled: the frozen limit alone would fetch per decision.
			// Not stretched: the bound below is a lease of k intervals,
			// and the limiters keep syncing every interval.
			hlsync.WithLowLimitThreshold(0), hlsync.WithTuning(hlsync.Tuning{LeaseStretch: 1}))
		var next atomic.Int64
		load := redistest.StartLoad(2*n, func(ctx context.Context) (bool, error) {
			l := ls[next.Add(1)%n]
			r, err := l.Allow(ctx, key, limit)
			if r.Remaining < 0 {
				negative.Add(1)
			}
			time.Sleep(200 * time.Microsecond) // leave the CPUs to Redis too
			return r.Allowed, err
		})
		time.Sleep(300 * time.Millisecond)
		faultAt = fault(ls)
		time.Sleep(300 * time.Millisecond)
		res = load.Stop()
		for _, l := range ls {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := l.Close(ctx)
			cancel()
			if err != nil {
				t.Errorf("%s: Close: %v", name, err)
			}
		}
		admitted, _ = res.Admitted(time.Time{}, time.Time{})
		return admitted, faultAt, ls, res
	}
	check := func(name string, res redistest.LoadResult, ls []*hlsync.Limiter) {
		t.Helper()
		if errs, first, _ := res.Errors(); errs > 0 {
			t.Errorf("%s: %d decisions returned an error, first %v", name, errs, first)
		}
		if v := negative.Load(); v != 0 {
			t.Errorf("%s: %d results with a negative Remaining", name, v)
		}
		for _, l := range ls {
			if s := l.Stats(); s.Outstanding < 0 {
				t.Errorf("%s: %s Outstanding = %d", name, l.InstanceID(), s.Outstanding)
			}
		}
	}

	// (a) CLUSTER FAILOVER on the replica.
	master, replicas := cl.SlotOwner(t, slot)
	if len(replicas) != 1 {
		t.Fatalf("slot %d: master %s, replicas %d; want one replica", slot, master.Addr, len(replicas))
	}
	// The replica has never run the script (scripts replicate by their
	// effects), so the new master meets EVALSHA with NOSCRIPT, in the
	// limiters' pipelines too.
	if ok, err := replicas[0].Client(t).ScriptExists(t.Context(), scripts.Sync.Hash()).Result(); err != nil || ok[0] {
		t.Fatalf("SCRIPT EXISTS on the replica = %v, %v; want an empty script cache", ok, err)
	}
	var took time.Duration
	admittedA, _, ls, res := phase("a", func([]*hlsync.Limiter) time.Time {
		at := time.Now()
		took = cl.Failover(t, replicas[0], slot)
		return at
	})
	left := remaining(t, cl.FreshClient(t), prefix, key, limit, 64)
	over := admittedA + left - burst
	t.Logf("manual failover (%v to agree): admitted %d, %d left, over-admission %d", took, admittedA, left, over)
	check("manual failover", res, ls)
	if over != 0 {
		t.Errorf("manual failover: admitted %d + left %d - budget %d = over-admission %d, want 0", admittedA, left, burst, over)
	}
	for _, l := range ls {
		// The old master holds writes while its replica catches up, longer
		// than the round timeout (one interval), so the breaker may open
		// for about that long: the failure policy decides meanwhile.
		s := l.Stats()
		t.Logf("manual failover: %s: breaker open %v in all, %d opens, %d rounds with errors", l.InstanceID(), s.BreakerOpenFor, s.BreakerOpens, s.RoundErrors)
		if s.BreakerOpenFor > took+10*interval {
			t.Errorf("manual failover: %s: breaker open for %v (failover took %v)", l.InstanceID(), s.BreakerOpenFor, took)
		}
	}

	// (b) SIGKILL of the master; the old master, now its replica, takes over.
	killed, heir := replicas[0], master
	var promoted, synced time.Duration
	admittedB, killAt, ls, res := phase("b", func(ls []*hlsync.Limiter) time.Time {
		at := time.Now()
		if err := killed.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cl.WaitServes(t, heir, slot, 10*time.Second)
		promoted = time.Since(at)
		// Wait until every limiter has had a round answered since the kill.
		for _, l := range ls {
			for time.Since(at) < promoted+5*time.Second {
				if s := l.Stats(); s.SinceSync < time.Since(at) && !s.BreakerOpen {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		synced = time.Since(at)
		return at
	})
	left = remaining(t, cl.FreshClient(t), prefix, key, limit, 64)
	over = admittedA + admittedB + left - burst
	_, lastMoments := res.Admitted(killAt.Add(-4*interval), killAt)
	bound := lastMoments + n*8
	for _, l := range ls {
		s := l.Stats()
		t.Logf("%s: breaker open %v in all, %d opens, %d rounds with errors", l.InstanceID(), s.BreakerOpenFor, s.BreakerOpens, s.RoundErrors)
	}
	t.Logf("SIGKILL (replica serving after %v, every limiter synced again after %v): admitted %d (%d in the %v before the kill), %d left, over-admission %d (bound %d)",
		promoted, synced, admittedB, lastMoments, 4*interval, left, over, bound)
	check("SIGKILL", res, ls)
	if synced > promoted+3*time.Second {
		t.Errorf("SIGKILL: limiters synced again %v after the kill, replica serving after %v", synced, promoted)
	}
	if over < 0 || over > bound {
		t.Errorf("SIGKILL: over-admission %d, want within [0, %d]", over, bound)
	}
	redistest.CheckTTLs(t, cl.FreshClient(t), prefix)
}

// TestBreakerDoesNotFlap stalls the master of a key's slot while the
// presence record lives on another master: the rounds carrying the key's
// messages fail for as long as the stall lasts, and the breaker stays
// open for all of it. The presence call, which still succeeds, is not
// taken as a sign that Redis is back while rounds have messages that fail
// (it was, and the breaker opened and closed every few ticks).
func TestBreakerDoesNotFlap(t *testing.T) {
	defaultBuildOnly(t)
	redistest.NoLeaksAfterKill(t)
	cl := redistest.NewClusterWith(t, "cluster-node-timeout 60000") // no failover during the stall
	prefix := redistest.Prefix(t)
	ks, err := hybridlimit.NewKeyspace(prefix)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	l, err := hlsync.New(c, hlsync.WithPrefix(prefix), hlsync.WithSyncInterval(50*time.Millisecond, 0),
		hlsync.WithFailurePolicy(hybridlimit.FailClosed), hlsync.WithLowLimitThreshold(0))
	if err != nil {
		t.Fatal(err)
	}
	presenceMaster, _ := cl.SlotOwner(t, hybridlimit.Slot(ks.Tagged("presence", "instances")))
	var key string
	var keyMaster *redistest.Server
	for i := 0; keyMaster == nil || keyMaster == presenceMaster; i++ {
		key = fmt.Sprint("k", i)
		bucket, _ := l.Keys(key)
		keyMaster, _ = cl.SlotOwner(t, hybridlimit.Slot(bucket))
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	ctx := context.Background()
	limit := frozen(1_000_000)
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		if r, err := l.Allow(ctx, key, limit); err == nil && r.Allowed {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("no admission before the stall")
		}
	}

	if err := keyMaster.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stalled := true
	t.Cleanup(func() {
		if stalled {
			_ = keyMaster.Signal(syscall.SIGCONT)
		}
	})
	for start := time.Now(); time.Since(start) < 2*time.Second; time.Sleep(5 * time.Millisecond) {
		if _, err := l.Allow(ctx, key, limit); err != nil {
			t.Fatal(err)
		}
	}
	if !l.Stats().BreakerOpen {
		t.Fatalf("breaker closed at the end of a 2s stall of the key's master: %+v", l.Stats())
	}
	if err := keyMaster.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stalled = false
	for start := time.Now(); l.Stats().BreakerOpen; time.Sleep(5 * time.Millisecond) {
		if _, err := l.Allow(ctx, key, limit); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("breaker still open 5s after the stall: %+v", l.Stats())
		}
	}
	if s := l.Stats(); s.BreakerOpens != 1 {
		t.Errorf("breaker opened %d times over one stall (open %v in all), want once", s.BreakerOpens, s.BreakerOpenFor)
	}
}
