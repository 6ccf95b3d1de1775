package sync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// answeredRounds bounds a round's calls at a minute of real time, where
// the default is the sync interval: these tests need each call answered,
// and on a virtual clock nothing else waits on it, but a machine loaded by
// other tests can take longer than an interval, and a call cut short is
// resent with the same sequence number, which is not what they test.
var answeredRounds = hlsync.WithRoundTimeout(time.Minute)

// TestSyncAfterClose: Sync (and BeginRound) do not check
// that the limiter is closed. The final round of Close leaves its entries
// in the schedule, so a Sync after Close (a caller driving the limiter
// without the loop, whose ticker fires once more) composes ordinary
// messages and leases tokens to an instance that will never spend or
// return them: a later Close returns nil at once.
func TestSyncAfterClose(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	ctx := context.Background()
	clk := clock.New(time.Now())
	l := clocked(t, rdb, clk, hlsync.WithPrefix(p), hlsync.WithInstanceID("a"), hlsync.WithLowLimitThreshold(0),
		answeredRounds)
	limit := frozen(100)
	if r, err := l.Allow(ctx, "k", limit); err != nil || !r.Allowed || r.Source != hybridlimit.SourceGlobal {
		t.Fatalf("Allow = %+v, %v", r, err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := remaining(t, rdb, p, "k", limit, 64); left != 99 {
		t.Fatalf("after Close Redis holds %d, want 99", left)
	}
	clk.Advance(time.Second)
	syncErr := l.Sync(ctx)
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	left := remaining(t, rdb, p, "k", limit, 64)
	t.Logf("Sync after Close = %v; Outstanding %d", syncErr, l.Stats().Outstanding)
	if left != 99 {
		t.Errorf("after Sync on a closed limiter Redis holds %d tokens, want 99: %d leased to a closed instance, never returned", left, 99-left)
	}
}

// TestRunCanceledRestarts: Run returns when its ctx ends, but
// leaves running set, so the limiter has no loop and can never get one
// again: Start and Run answer ErrRunning.
func TestRunCanceledRestarts(t *testing.T) {
	redistest.NoLeaks(t)
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if err := l.Start(); err != nil {
		t.Errorf("Start after Run returned = %v; no loop runs, want nil", err)
	}
}

// TestLostGrantRestated: a failover lost the grant of a's ledger (its
// total reads 0) while another instance took the bucket: a's next message
// restates the 16 tokens it was granted, so that Redis takes them again,
// into debt, and what a spent is paid for; Stats.Admitted stays 16.
func TestLostGrantRestated(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	ctx := context.Background()
	clk := clock.New(time.Now())
	prefix := redistest.Prefix(t)
	// Threshold 0: a frozen limit leases ahead like any key, so the key
	// has something to say at its next round.
	l := clocked(t, rdb, clk, hlsync.WithPrefix(prefix), hlsync.WithInstanceID("a"), hlsync.WithLowLimitThreshold(0),
		answeredRounds)
	limit := frozen(16)
	if r, err := l.AllowN(ctx, "k", limit, 16); err != nil || !r.Allowed || r.Source != hybridlimit.SourceGlobal {
		t.Fatalf("AllowN(16) = %+v, %v", r, err)
	}
	bucket, _ := l.Keys("k")
	field := scripts.SyncLedgerField("a")
	ledger, err := scripts.ParseSyncLedger(rdb.HGet(ctx, bucket, field).Val())
	if err != nil {
		t.Fatal(err)
	}
	// The grant is lost; the bucket stays empty (another instance took it).
	lost := ledger
	lost.Total = 0
	if err := rdb.HSet(ctx, bucket, field, lost.String()).Err(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ledger2, err := scripts.ParseSyncLedger(rdb.HGet(ctx, bucket, field).Val())
	took := taken(t, rdb, prefix, "k", limit, 64)
	s := l.Stats()
	t.Logf("ledger %+v -> %+v; Redis took %d; Admitted %d", ledger, ledger2, took, s.Admitted)
	if err != nil || ledger2.Total != 16 {
		t.Errorf("ledger after the next message %+v (%v), want a total of 16", ledger2, err)
	}
	if took != 32 {
		t.Errorf("Redis took %d of a bucket of 16, want 32: a's 16 again on top of the other's", took)
	}
	if s.Admitted != 16 {
		t.Errorf("Stats.Admitted = %d, want 16", s.Admitted)
	}
}
