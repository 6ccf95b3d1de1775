package sync_test

import (
	"context"
	"fmt"
	stdsync "sync"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestFetchLingerBatches checks Tuning.FetchLinger: decisions on keys new
// to the instance wait, sending nothing, until the linger has passed on
// the limiter's clock, and then all their keys go to Redis in one call;
// with the loop running (Start) and without it.
func TestFetchLingerBatches(t *testing.T) {
	redistest.NoLeaks(t)
	const linger, keys = 50 * time.Millisecond, 20
	for _, started := range []bool{true, false} {
		t.Run(fmt.Sprintf("started=%v", started), func(t *testing.T) {
			clk := clock.New(time.Now())
			l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithClock(clk),
				hlsync.WithMaxWait(time.Minute), hlsync.WithTuning(hlsync.Tuning{FetchLinger: linger}))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = l.Close(context.Background()) }()
			if started {
				if err := l.Start(); err != nil {
					t.Fatal(err)
				}
			}
			before := l.Stats()
			var wg stdsync.WaitGroup
			results := make([]hybridlimit.Result, keys)
			for i := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := l.Allow(context.Background(), fmt.Sprint("k", i), hybridlimit.PerSecond(1000))
					if err != nil {
						t.Error(err)
					}
					results[i] = r
				}()
			}
			waitFor(t, "every decision to wait", func() bool { return l.Stats().Waits-before.Waits == keys })
			time.Sleep(20 * time.Millisecond) // real time: the linger runs on clk
			if n := l.Stats().ScriptCalls - before.ScriptCalls; n != 0 {
				t.Fatalf("%d script calls before the linger passed, want 0", n)
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			for stepped := false; !stepped; {
				clk.Advance(time.Millisecond)
				select {
				case <-done:
					stepped = true
				case <-time.After(time.Millisecond):
				}
			}
			if n := l.Stats().ScriptCalls - before.ScriptCalls; n != 1 {
				t.Errorf("%d script calls for %d new keys within a linger, want 1", n, keys)
			}
			for i, r := range results {
				if !r.Allowed || r.Source != hybridlimit.SourceGlobal {
					t.Errorf("key %d: %+v, want allowed from Redis", i, r)
				}
			}
		})
	}
}

// waitFor polls cond every millisecond for up to ten seconds of real time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
