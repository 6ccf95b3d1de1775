package sync_test

import (
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestQuietKeySyncsRarely runs the loop's rounds by hand on a clock the
// test moves, a tick at a time, for a key far under its limit: a decision
// a second against 1000 a second. The key's lease is stretched while its
// bucket has room, and the key is not looked at while its allowance lasts,
// so it syncs every several seconds, not every interval, and never runs
// out: no decision after the first waits for Redis.
func TestQuietKeySyncsRarely(t *testing.T) {
	redistest.NoLeaks(t)
	clk := clock.New(time.Now())
	const interval = 250 * time.Millisecond
	l := clocked(t, redistest.Standalone(t), clk, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithSyncInterval(interval, 0.1))
	ctx := context.Background()
	limit := hybridlimit.PerSecond(1000)
	const seconds = 120
	for tick := range seconds * 4 {
		if tick%4 == 0 {
			if r, err := l.Allow(ctx, "k", limit); err != nil || !r.Allowed {
				t.Fatalf("decision at %v = %+v, %v; want admitted", time.Duration(tick)*interval/4, r, err)
			}
		}
		clk.Advance(interval / 4)
		r := l.BeginRound()
		if err := r.Send(ctx); err != nil {
			t.Fatal(err)
		}
		r.Finish()
	}
	s := l.Stats()
	t.Logf("%d messages, %d fetches in %ds (%d intervals)", s.Messages, s.Fetches, seconds, seconds*4)
	if s.Fetches != 1 {
		t.Errorf("%d fetches, want 1: the key ran out of allowance", s.Fetches)
	}
	// Every interval would be 480; the minimum lease alone (8 tokens, a
	// top-up at 4) about 30.
	if s.Messages > 15 {
		t.Errorf("%d messages in %d seconds for a decision a second, want at most 15", s.Messages, seconds)
	}
}

// TestLowKeyRidesNextCall leaves a key in use under its ride mark
// (account.Policy.RideBelow) between its visits: no call goes for it
// alone, and the next call to its node, a fetch for another key, carries
// its top-up, so that it does not run out and wait before its next visit.
func TestLowKeyRidesNextCall(t *testing.T) {
	defaultBuildOnly(t) // a key spread over per-CPU counters is left to its visits
	rdb := redistest.Standalone(t)
	clk := clock.New(time.Now())
	l := clocked(t, rdb, clk, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithSyncInterval(100*time.Millisecond, 0))
	ctx := context.Background()
	limit := hybridlimit.PerSecond(1000)
	allow := func(key string, n int) {
		t.Helper()
		for range n {
			if r, err := l.Allow(ctx, key, limit); err != nil || !r.Allowed {
				t.Fatalf("%s: %+v, %v", key, r, err)
			}
		}
	}
	// 40 decisions a second for two seconds, a round each interval: the
	// key's demand is measured and its lease follows it.
	for range 20 {
		allow("a", 4)
		clk.Advance(100 * time.Millisecond)
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, below := l.Holding("a")
	if below <= 0 || held < below {
		t.Fatalf("after two seconds in use: holds %d, ride mark %d; want a mark above 0 and at most what it holds", held, below)
	}
	allow("a", int(held-below+1))
	s0 := l.Stats()
	if err := l.Sync(ctx); err != nil { // nothing due: no call
		t.Fatal(err)
	}
	if s := l.Stats(); s.ScriptCalls != s0.ScriptCalls {
		t.Fatalf("a round with only a rider made %d calls, want 0", s.ScriptCalls-s0.ScriptCalls)
	}
	allow("b", 1) // a new key: a fetch, which carries a's top-up
	s := l.Stats()
	if calls, msgs := s.ScriptCalls-s0.ScriptCalls, s.Messages-s0.Messages; calls != 1 || msgs != 2 {
		t.Errorf("b's fetch: %d calls, %d messages; want 1 call of 2 messages (b's and a's)", calls, msgs)
	}
	if now, _ := l.Holding("a"); now < held {
		t.Errorf("a holds %d after the call to its node, want its lease back (%d)", now, held)
	}
}
