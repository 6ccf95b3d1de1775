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
