package sync

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestOldPartLeftOpenIsClosedLater merges a split key while one old part
// cannot be closed. That part stayed open for good: its instance never
// heard of the move and spent the part's rate on top of the merged
// layout's, which has the key's whole rate. It must be closed again once
// its master answers, and its instance follow.
func TestOldPartLeftOpenIsClosedLater(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	mk := func(c *redis.Client, id string) *Limiter {
		l, err := New(c, WithPrefix(prefix), WithInstanceID(id), WithSyncInterval(50*time.Millisecond, 0),
			WithLowLimitThreshold(0), WithAutoSplit(AutoSplit{Max: 3, Above: 1e8}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(ctx) })
		return l
	}
	ca := srv.Client(t)
	a, b := mk(ca, "a"), mk(srv.Client(t), "b")
	limit := hybridlimit.Limit{Rate: 600, Period: time.Second, Burst: 600}
	split, merged := layout{3, 1}, layout{1, 2}
	if err := a.reshard(ctx, "hot", limit, layout{1, 0}, split); err != nil {
		t.Fatal(err)
	}
	if r, err := b.AllowN(ctx, "hot", limit, 1); err != nil || !r.Allowed {
		t.Fatalf("b: %+v, %v", r, err)
	}
	if s, g := b.Layout("hot"); s != split.shards || g != split.gen {
		t.Fatalf("b on %d.%d, want %d.%d", s, g, split.shards, split.gen)
	}
	// b's home part cannot be closed while down is set, as if its master
	// were unreachable at that moment.
	bucket := a.bucketOf("hot", b.home("hot", split.shards), split)
	var down atomic.Bool
	down.Store(true)
	ca.AddHook(&redistest.CommandHook{Args: []string{"close", bucket}, Before: func() error {
		if down.Load() {
			return errors.New("injected: the part's master is unreachable")
		}
		return nil
	}})
	if err := a.reshard(ctx, "hot", limit, split, merged); err == nil {
		t.Fatal("the merge with a part failing to close reported no error")
	}
	down.Store(false) // the master answers again
	if err := a.Reshard(ctx); err != nil {
		t.Fatalf("Reshard closing the part left open: %v", err)
	}
	if raw := ca.HGet(ctx, bucket, "t").Val(); raw != merged.marker() {
		t.Errorf("b's home part holds %q after Reshard, want the marker %q", raw, merged.marker())
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := b.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.AllowN(ctx, "hot", limit, 1); err != nil {
			t.Fatal(err)
		}
		if s, _ := b.Layout("hot"); s == merged.shards {
			break
		}
	}
	if s, g := b.Layout("hot"); s != merged.shards || g != merged.gen {
		t.Errorf("b on %d.%d, the key on %d.%d", s, g, merged.shards, merged.gen)
	}
}
