package sync_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/sharding"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// drain asks for key for the time given, and returns the cost admitted.
func drain(t *testing.T, l *hlsync.Limiter, key string, limit hybridlimit.Limit, within time.Duration) int64 {
	t.Helper()
	var n int64
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		r, err := l.Allow(context.Background(), key, limit)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			n++
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return n
}

// TestShardCountChangeStartsAfresh spends a frozen budget of 100 split 2
// ways, then changes the configured count to 3 while the key is tracked:
// the new layout's parts are fresh, full buckets, so the key may admit its
// budget once more (design 8 said it cost only an undershoot), and no
// more than that.
func TestShardCountChangeStartsAfresh(t *testing.T) {
	c := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	var s atomic.Int64
	s.Store(2)
	l, err := hlsync.New(c, hlsync.WithPrefix(prefix), hlsync.WithSyncInterval(20*time.Millisecond, 0.1),
		hlsync.WithSplitKeys(func(string, hybridlimit.Limit) int { return int(s.Load()) }))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	limit := frozen(100)
	first := drain(t, l, "hot", limit, 1500*time.Millisecond)
	s.Store(3)
	second := drain(t, l, "hot", limit, 1500*time.Millisecond)
	t.Logf("admitted %d split 2 ways, then %d more after the count became 3", first, second)
	if first > limit.Burst || second > limit.Burst {
		t.Errorf("a frozen budget of %d admitted %d, then %d after a shard-count change: more than one burst per layout", limit.Burst, first, second)
	}
}

// TestRemainingNeverAboveBurst: a key under light steady use (its bucket
// near full) tops its lease up while it still holds some; the reply says
// the bucket holds Burst less the top-up, and the decision added what the
// instance holds: Remaining read up to 1,050 of a burst of 1,000.
func TestRemainingNeverAboveBurst(t *testing.T) {
	c := redistest.Standalone(t)
	for _, shards := range []int{1, 2} {
		l, err := hlsync.New(c, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithSyncInterval(20*time.Millisecond, 0.1),
			hlsync.WithSplitKeys(func(string, hybridlimit.Limit) int { return shards }))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(); err != nil {
			t.Fatal(err)
		}
		limit := hybridlimit.PerSecond(1000)
		var worst int64
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			r, err := l.Allow(context.Background(), "k", limit)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				worst = max(worst, r.Remaining)
			}
		}
		_ = l.Close(context.Background())
		t.Logf("%d shards: highest Remaining %d of burst %d", shards, worst, limit.Burst)
		if worst > limit.Burst {
			t.Errorf("%d shards: Remaining %d above the burst %d", shards, worst, limit.Burst)
		}
	}
}

// TestCostAbovePartBurstNeverAdmitted: burst 5 split 2 ways is parts of
// 3 and 2, and a cost of 3 is refused with ErrCostExceedsBurst (the
// smallest part's burst bounds a cost), but that was checked on the slow
// path only: the fast path paid it from the home part's allowance whenever
// that held 3 (6 admitted, 868 refused).
func TestCostAbovePartBurstNeverAdmitted(t *testing.T) {
	c := redistest.Standalone(t)
	id := ""
	for i := 0; ; i++ {
		id = "i" + string(rune('a'+i%26)) + time.Duration(i).String()
		if sharding.Home(id, "hot", 2) == 0 {
			break
		}
	}
	l, err := hlsync.New(c, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithInstanceID(id), hlsync.WithSyncInterval(20*time.Millisecond, 0.1),
		hlsync.WithSplitKeys(func(string, hybridlimit.Limit) int { return 2 }))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	limit := hybridlimit.PerSecond(10000).WithBurst(5)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	background := make(chan struct{})
	go func() {
		defer close(background)
		for ctx.Err() == nil {
			_, _ = l.Allow(ctx, "hot", limit)
		}
	}()
	defer func() { <-background }()
	var admitted, refused int
	for ctx.Err() == nil {
		r, err := l.AllowN(ctx, "hot", limit, 3)
		switch {
		case errors.Is(err, hybridlimit.ErrCostExceedsBurst):
			refused++
		case err == nil && r.Allowed:
			admitted++
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Logf("cost 3 over parts of 3 and 2: admitted %d times, refused as above a part's burst %d times", admitted, refused)
	if admitted > 0 || refused == 0 {
		t.Errorf("cost 3 admitted %d times, refused %d: want always refused as exceeding a part's burst", admitted, refused)
	}
}
