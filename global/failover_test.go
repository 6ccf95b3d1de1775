package global

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// failoverNodeTimeout is the cluster-node-timeout of the private clusters
// of the failover tests: a replica starts its election about this long
// after its master dies.
const failoverNodeTimeout = 500 * time.Millisecond

// TestFailover runs GCRA and FixedWindow under load on a private 3+3
// cluster while the master of their key's slot (a) hands over to its
// replica with CLUSTER FAILOVER and (b) is killed with SIGKILL. After each
// it stops the load and compares what the callers were admitted with what
// the new master has counted: the difference is the over-admission the
// failover caused.
//
// Bounds asserted:
//   - (a) is loss-free: CLUSTER FAILOVER waits for the replica to catch up
//     before the swap, and go-redis follows the MOVED replies, so no caller
//     sees an error and the over-admission is 0. The new master starts
//     with an empty script cache (NOSCRIPT, answered by the EVAL fallback).
//   - (b) loses what the dead master acknowledged but had not yet streamed
//     to its replica (asynchronous replication): the admissions of the last
//     moments before the kill. The test asserts the over-admission is at
//     most what was admitted in the 100 ms before the kill (the replication
//     lag on loopback is far below that), and so at most one burst. Callers
//     see errors (wrapping hybridlimit.ErrUnavailable, never a panic or a
//     negative Remaining) from the kill until the replica has taken over and
//     the client has learnt it, which must happen within a few seconds.
func TestFailover(t *testing.T) {
	redistest.NoLeaksAfterKill(t)
	cl := redistest.NewClusterWith(t, fmt.Sprintf("cluster-node-timeout %d", failoverNodeTimeout.Milliseconds()))
	c := cl.Client(t)
	p := redistest.Prefix(t)
	const key, burst = "victim", 100_000
	slot := hybridlimit.Slot(key) // the hash tag is the key itself
	algs := []struct {
		alg   Algorithm
		limit hybridlimit.Limit
	}{
		// Refill over the test is far below a token (fewer than 0.01), so
		// whatever Redis has counted is burst - remaining.
		{GCRA, hybridlimit.Limit{Rate: burst, Period: hybridlimit.MaxRefill, Burst: burst}},
		// A window of a year: the test cannot straddle two (it would
		// report an absurd over-admission if it did).
		{FixedWindow, hybridlimit.Limit{Rate: burst, Period: 365 * 24 * time.Hour, Burst: burst}},
	}
	ls := make([]*Limiter, len(algs))
	for i, a := range algs {
		l, err := New(c, a.alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	var negative [2]atomic.Int64
	startLoad := func(i int) *redistest.Load {
		return redistest.StartLoad(3, func(ctx context.Context) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			r, err := ls[i].Allow(ctx, key, algs[i].limit)
			if err != nil {
				if !errors.Is(err, hybridlimit.ErrUnavailable) && ctx.Err() == nil {
					err = fmt.Errorf("error not wrapping ErrUnavailable: %w", err)
				}
				return false, err
			}
			if r.Remaining < 0 {
				negative[i].Add(1)
			}
			return r.Allowed, nil
		})
	}
	counted := func(i int) int64 {
		l, err := New(cl.FreshClient(t), algs[i].alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		r, err := l.Peek(t.Context(), key, algs[i].limit)
		if err != nil {
			t.Fatalf("%v: Peek: %v", algs[i].alg, err)
		}
		return burst - r.Remaining
	}
	runPhase := func(fault func() (faultAt time.Time)) (results [2]redistest.LoadResult, faultAt time.Time) {
		loads := [2]*redistest.Load{startLoad(0), startLoad(1)}
		time.Sleep(200 * time.Millisecond)
		faultAt = fault()
		time.Sleep(300 * time.Millisecond)
		for i := range loads {
			results[i] = loads[i].Stop()
		}
		return results, faultAt
	}
	var admittedBefore [2]int64

	// (a) CLUSTER FAILOVER on the replica.
	master, replicas := cl.SlotOwner(t, slot)
	if len(replicas) != 1 {
		t.Fatalf("slot %d: master %s, replicas %v; want one replica", slot, master.Addr, replicas)
	}
	// The replica has never run a script (scripts replicate by their
	// effects), so the new master meets EVALSHA with NOSCRIPT.
	if ok, err := replicas[0].Client(t).ScriptExists(t.Context(), scripts.GCRA.Hash(), scripts.FixedWindow.Hash()).Result(); err != nil || ok[0] || ok[1] {
		t.Fatalf("SCRIPT EXISTS on the replica = %v, %v; want an empty script cache", ok, err)
	}
	var took time.Duration
	res, _ := runPhase(func() time.Time {
		at := time.Now()
		took = cl.Failover(t, replicas[0], slot)
		return at
	})
	for i, a := range algs {
		n, first, span := res[i].Errors()
		all, _ := res[i].Admitted(time.Time{}, time.Time{})
		over := all - counted(i)
		t.Logf("manual failover (%v to agree), %v: %d decisions, %d admitted, over-admission %d, %d errors over %v (first: %v)",
			took, a.alg, len(res[i].Decisions), all, over, n, span, first)
		if n > 0 {
			t.Errorf("manual failover, %v: %d errors reached callers, first %v", a.alg, n, first)
		}
		if over != 0 {
			t.Errorf("manual failover, %v: admitted %d, Redis counted %d: over-admission %d, want 0", a.alg, all, all-over, over)
		}
		admittedBefore[i] = all
	}

	// (b) SIGKILL of the master; the old master, now its replica, takes over.
	killed, heir := replicas[0], master
	var promoted, answered time.Duration
	res, killAt := runPhase(func() time.Time {
		at := time.Now()
		if err := killed.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cl.WaitServes(t, heir, slot, 10*time.Second)
		promoted = time.Since(at)
		// Keep the load on until the limiters answer again (or clearly
		// do not), through the client the load uses.
		for i := range ls {
			for time.Since(at) < promoted+5*time.Second {
				if _, err := ls[i].Peek(t.Context(), key, algs[i].limit); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		answered = time.Since(at)
		return at
	})
	for i, a := range algs {
		n, first, span := res[i].Errors()
		all, lastMoments := res[i].Admitted(killAt.Add(-100*time.Millisecond), killAt)
		over := admittedBefore[i] + all - counted(i)
		back, ok := res[i].Recovered()
		t.Logf("SIGKILL (replica serving after %v, Peek answers after %v), %v: %d decisions, %d admitted (%d in the 100ms before the kill), over-admission %d, %d errors over %v, recovered %v after the kill (first error: %v)",
			promoted, answered, a.alg, len(res[i].Decisions), all, lastMoments, over, n, span, back.Sub(killAt), first)
		if !ok {
			t.Errorf("SIGKILL, %v: decisions still failing %v after the kill", a.alg, answered+300*time.Millisecond)
		} else if d := back.Sub(killAt); d > promoted+3*time.Second {
			t.Errorf("SIGKILL, %v: recovered %v after the kill, replica serving after %v", a.alg, d, promoted)
		}
		// A decision whose reply was lost to the kill after the script ran
		// (and replicated) counts in Redis without being admitted: hence
		// the lower bound -n.
		if over < -int64(n) || over > lastMoments || over > burst {
			t.Errorf("SIGKILL, %v: over-admission %d, want within [%d, %d] (admitted in the 100ms before the kill)", a.alg, over, -n, lastMoments)
		}
		for _, d := range res[i].Decisions {
			if d.Err != nil && !errors.Is(d.Err, hybridlimit.ErrUnavailable) {
				t.Errorf("SIGKILL, %v: %v", a.alg, d.Err)
				break
			}
		}
		if n := negative[i].Load(); n != 0 {
			t.Errorf("%v: %d results with a negative Remaining", a.alg, n)
		}
	}
	redistest.CheckTTLs(t, cl.FreshClient(t), p)
}
