package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/sharding"
)

var (
	topologies = redistest.Topologies
	checkTTLs  = redistest.CheckTTLs
)

// TestGlobalSuffixExact hammers one split key from many goroutines, with
// no refill to speak of: every algorithm admits exactly the burst, no more
// (the parts add up to the limit) and no less (dry parts fall over to
// their siblings).
func TestGlobalSuffixExact(t *testing.T) {
	redistest.NoLeaks(t)
	algs := []global.Algorithm{global.GCRA, global.TokenBucket, global.FixedWindow, global.SlidingWindow, global.SlidingLog}
	for _, topo := range topologies {
		for _, alg := range algs {
			t.Run(topo.Name+"/"+alg.String(), func(t *testing.T) {
				rdb := topo.Dial(t)
				prefix := redistest.Prefix(t)
				g, err := sharding.NewGlobal(rdb, alg, sharding.Suffix, sharding.Fixed(4), sharding.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				limit := hybridlimit.PerHour(1).WithBurst(203)
				var admitted atomic.Int64
				var wg stdsync.WaitGroup
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 40 {
							r, err := g.Allow(context.Background(), "hot", limit)
							if err != nil {
								t.Error(err)
								return
							}
							if r.Allowed {
								admitted.Add(1)
								if r.Remaining < 0 || r.Remaining > limit.Burst {
									t.Errorf("remaining %d", r.Remaining)
								}
							} else if r.RetryAfter <= 0 {
								t.Errorf("denied with RetryAfter %v", r.RetryAfter)
							}
						}
					}()
				}
				wg.Wait()
				if got := admitted.Load(); got != limit.Burst {
					t.Errorf("admitted %d of 320, want exactly %d", got, limit.Burst)
				}
				peek, err := g.Peek(context.Background(), "hot", limit)
				if err != nil {
					t.Fatal(err)
				}
				if peek.Allowed || peek.Remaining != 0 || peek.RetryAfter <= 0 {
					t.Errorf("Peek after exhaustion = %+v", peek)
				}
				checkTTLs(t, rdb, prefix)
			})
		}
	}
}

// TestGlobalPeekSums spends from a split key and checks that Peek sums
// what every part has left.
func TestGlobalPeekSums(t *testing.T) {
	rdb := redistest.Cluster(t)
	prefix := redistest.Prefix(t)
	g, err := sharding.NewGlobal(rdb, global.GCRA, sharding.Suffix, sharding.Fixed(3), sharding.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	limit := hybridlimit.PerHour(1).WithBurst(30)
	ctx := context.Background()
	for range 7 {
		if r, err := g.AllowN(ctx, "k", limit, 2); err != nil || !r.Allowed {
			t.Fatalf("AllowN = %+v, %v", r, err)
		}
	}
	r, err := g.Peek(ctx, "k", limit)
	if err != nil {
		t.Fatal(err)
	}
	if r.Remaining != 30-14 || !r.Allowed || r.Limit != limit {
		t.Errorf("Peek = %+v, want remaining 16 of the whole limit", r)
	}
	// A cost no part can hold is an error, not a silent denial.
	if _, err := g.AllowN(ctx, "k", limit, 11); !errors.Is(err, hybridlimit.ErrCostExceedsBurst) {
		t.Errorf("cost 11 over parts of 10: err = %v", err)
	}
}

// TestGlobalTimeLayout checks the time-sharded fixed window: each window
// admits exactly the whole limit, and consecutive windows use the parts in
// turn, on distinct slots.
func TestGlobalTimeLayout(t *testing.T) {
	rdb := redistest.Cluster(t)
	prefix := redistest.Prefix(t)
	var now atomic.Int64
	now.Store(time.Unix(1_800_000_000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	g, err := sharding.NewGlobal(rdb, global.FixedWindow, sharding.Time, sharding.Fixed(3), sharding.WithPrefix(prefix), sharding.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	limit := hybridlimit.PerSecond(10)
	ctx := context.Background()
	for w := range 6 {
		admitted := 0
		for range 25 {
			r, err := g.Allow(ctx, "t", limit)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				admitted++
			}
		}
		if admitted != 10 {
			t.Errorf("window %d admitted %d, want 10", w, admitted)
		}
		now.Add(int64(time.Second))
	}
	if _, err := sharding.NewGlobal(rdb, global.GCRA, sharding.Time, sharding.Fixed(3)); err == nil {
		t.Error("the time layout accepted GCRA")
	}
	checkTTLs(t, rdb, prefix)
}

// TestGlobalSpreadsOverMasters is the cluster proof: a key split 3 ways has
// its parts on all three masters, and one hot key's commands spread over
// the masters within 1.5x of each other, where unsplit they all land on
// one.
func TestGlobalSpreadsOverMasters(t *testing.T) {
	cc := redistest.Cluster(t)
	prefix := redistest.Prefix(t)
	ks, err := hybridlimit.NewKeyspace(prefix + "sh:")
	if err != nil {
		t.Fatal(err)
	}
	owners := redistest.SlotOwners(t, cc)
	masters := make(map[string]bool)
	for _, a := range owners {
		masters[a] = true
	}
	for _, s := range []int{2, 3, 4, 6} {
		on := make(map[string]bool)
		for j := range s {
			name, err := ks.Key(sharding.PartKey("flash-sale", j, s), "gcra2")
			if err != nil {
				t.Fatal(err)
			}
			slot, err := cc.ClusterKeySlot(context.Background(), name).Result()
			if err != nil {
				t.Fatal(err)
			}
			on[owners[int(slot)]] = true
		}
		if want := min(s, len(masters)); len(on) < want {
			t.Errorf("%d parts on %d masters, want %d", s, len(on), want)
		}
	}

	limit := hybridlimit.PerHour(100).WithBurst(100_000) // keys that outlive the test, for the TTL check
	const requests = 3000
	spread := func(shards int) []float64 {
		g, err := sharding.NewGlobal(cc, global.GCRA, sharding.Suffix, sharding.Fixed(shards), sharding.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		before := redistest.CommandCalls(t, cc, "evalsha", "eval")
		for range requests {
			if r, err := g.Allow(context.Background(), "hot", limit); err != nil || !r.Allowed {
				t.Fatalf("Allow = %+v, %v", r, err)
			}
		}
		after := redistest.CommandCalls(t, cc, "evalsha", "eval")
		var calls []float64
		for addr, n := range after {
			calls = append(calls, float64(n-before[addr]))
		}
		return calls
	}
	whole := spread(1)
	split := spread(3)
	t.Logf("script calls per master: whole %v, split 3 ways %v", whole, split)
	if busiest := slicesMax(whole); busiest < 0.95*requests {
		t.Errorf("unsplit: busiest master ran %.0f of %d calls, want all on one", busiest, requests)
	}
	if lo, hi := slicesMin(split), slicesMax(split); lo == 0 || hi/lo > 1.5 {
		t.Errorf("split 3 ways: per-master calls %v, want within 1.5x", split)
	}
	checkTTLs(t, cc, prefix)
}

func slicesMax(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func slicesMin(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func TestGlobalBadInput(t *testing.T) {
	rdb := redistest.Standalone(t)
	if _, err := sharding.NewGlobal(nil, global.GCRA, sharding.Suffix, sharding.Fixed(2)); !errors.Is(err, hybridlimit.ErrNilClient) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := sharding.NewGlobal(rdb, global.GCRA, sharding.Suffix, nil); err == nil {
		t.Error("nil shard function accepted")
	}
	if _, err := sharding.NewGlobal(rdb, global.GCRA, 0, sharding.Fixed(2)); err == nil {
		t.Error("layout 0 accepted")
	}
	if _, err := sharding.NewGlobal(rdb, global.GCRA, sharding.Suffix, sharding.Fixed(2), sharding.WithPrefix("{bad")); err == nil {
		t.Error("prefix with a brace accepted")
	}
	ctx := context.Background()
	for _, s := range []int{0, -3, sharding.MaxShards + 1} {
		g, err := sharding.NewGlobal(rdb, global.GCRA, sharding.Suffix, sharding.Fixed(s))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Allow(ctx, "k", hybridlimit.PerSecond(10)); !errors.Is(err, sharding.ErrInvalidShards) {
			t.Errorf("%d shards: err = %v", s, err)
		}
	}
	g, err := sharding.NewGlobal(rdb, global.GCRA, sharding.Suffix, sharding.Fixed(4))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		key   string
		limit hybridlimit.Limit
		cost  int64
		want  error
	}{
		{"", hybridlimit.PerSecond(10), 1, hybridlimit.ErrInvalidKey},
		{"k", hybridlimit.Limit{}, 1, hybridlimit.ErrInvalidLimit},
		{"k", hybridlimit.PerSecond(-1), 1, hybridlimit.ErrInvalidLimit},
		{"k", hybridlimit.PerSecond(10), 0, hybridlimit.ErrInvalidCost},
		{"k", hybridlimit.PerSecond(10), -1, hybridlimit.ErrInvalidCost},
		{"k", hybridlimit.PerSecond(10), 11, hybridlimit.ErrCostExceedsBurst},
	}
	for _, c := range cases {
		if _, err := g.AllowN(ctx, c.key, c.limit, c.cost); !errors.Is(err, c.want) {
			t.Errorf("AllowN(%q, %v, %d) = %v, want %v", c.key, c.limit, c.cost, err, c.want)
		}
	}
	// A split key's parts append a suffix: the longest key a split takes
	// works under every shard count and layout, one byte more is refused
	// by its own length (it was refused as a part, by a length the caller
	// never passed).
	for _, layout := range []sharding.Layout{sharding.Suffix, sharding.Time} {
		for _, s := range []int{2, 37, sharding.MaxShards} {
			g, err := sharding.NewGlobal(rdb, global.FixedWindow, layout, sharding.Fixed(s), sharding.WithPrefix(redistest.Prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			longest := strings.Repeat("k", sharding.MaxSplitKeyLen)
			if r, err := g.Allow(ctx, longest, hybridlimit.PerSecond(1000)); err != nil || !r.Allowed {
				t.Errorf("%v, %d parts: a key of %d bytes: %+v, %v", layout, s, len(longest), r, err)
			}
			if _, err := g.Peek(ctx, longest, hybridlimit.PerSecond(1000)); err != nil {
				t.Errorf("%v, %d parts: Peek of a key of %d bytes: %v", layout, s, len(longest), err)
			}
			_, err = g.Allow(ctx, longest+"k", hybridlimit.PerSecond(1000))
			if !errors.Is(err, hybridlimit.ErrInvalidKey) || !strings.Contains(err.Error(), fmt.Sprintf("key is %d bytes", sharding.MaxSplitKeyLen+1)) {
				t.Errorf("%v, %d parts: a key of %d bytes: %v", layout, s, sharding.MaxSplitKeyLen+1, err)
			}
		}
	}
}

// TestGlobalDenialsRemembered checks the claim that a split key at its
// limit costs one Redis call per request, not one per part: a part that
// denied is skipped until its retry time, under the limit it denied for.
func TestGlobalDenialsRemembered(t *testing.T) {
	cc := redistest.Cluster(t)
	prefix := redistest.Prefix(t)
	g, err := sharding.NewGlobal(cc, global.GCRA, sharding.Suffix, sharding.Fixed(4), sharding.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := hybridlimit.PerHour(4).WithBurst(40)
	for range 40 {
		if r, err := g.Allow(ctx, "k", limit); err != nil || !r.Allowed {
			t.Fatalf("Allow = %+v, %v", r, err)
		}
	}
	sum := func(m map[string]int64) (n int64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	before := sum(redistest.CommandCalls(t, cc, "evalsha", "eval"))
	const denials = 100
	for range denials {
		if r, err := g.Allow(ctx, "k", limit); err != nil || r.Allowed || r.RetryAfter <= 0 {
			t.Fatalf("Allow past the budget = %+v, %v", r, err)
		}
	}
	calls := sum(redistest.CommandCalls(t, cc, "evalsha", "eval")) - before
	t.Logf("%d denials of a key split 4 ways cost %d script calls", denials, calls)
	if calls > 4 {
		t.Errorf("%d denials cost %d script calls, want each part asked once", denials, calls)
	}
	// A looser limit is asked of Redis, not denied from memory (which
	// denies it too: the parts keep their tokens, none, under a raised
	// burst, and refill at its rate).
	before = sum(redistest.CommandCalls(t, cc, "evalsha", "eval"))
	if _, err := g.Allow(ctx, "k", limit.WithBurst(80)); err != nil {
		t.Fatal(err)
	}
	if calls := sum(redistest.CommandCalls(t, cc, "evalsha", "eval")) - before; calls == 0 {
		t.Errorf("Allow under a doubled burst made no script call: denied from memory")
	}
}

// TestTimeLayoutPeriodNotWholeMicros runs the Time layout with a period
// of a third of a second, which the window script rounds up to 333,334
// microseconds: one window, asked at its first and last microsecond, must
// stay on one part and admit its quota once, not once per part.
func TestTimeLayoutPeriodNotWholeMicros(t *testing.T) {
	rdb := redistest.Standalone(t)
	var now atomic.Int64
	g, err := sharding.NewGlobal(rdb, global.FixedWindow, sharding.Time, sharding.Fixed(2),
		sharding.WithPrefix(redistest.Prefix(t)), sharding.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
	if err != nil {
		t.Fatal(err)
	}
	limit := hybridlimit.Limit{Rate: 5, Period: time.Second / 3, Burst: 5}
	const window = 333334 // microseconds
	// A window over which a period rounded down (333,333 us) would
	// change its index.
	start := int64(1_800_000_000_000_000) / window * window
	for start/333333 == (start+window-1)/333333 {
		start += window
	}
	admitted := 0
	for _, us := range []int64{start, start + window - 1} {
		now.Store(us * 1000)
		for range 5 {
			r, err := g.Allow(context.Background(), "k", limit)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				admitted++
			}
		}
	}
	if admitted != 5 {
		t.Errorf("one window admitted %d, quota 5", admitted)
	}
}

// TestSuffixDenialsOnRealTime splits a key 2 ways under a clock that
// never moves (WithClock, meant for the Time layout): a part's remembered
// denial still ends when Redis would admit again, since Redis decides by
// its own time. Before, the frozen clock kept every part remembered as
// empty.
func TestSuffixDenialsOnRealTime(t *testing.T) {
	rdb := redistest.Standalone(t)
	frozen := time.Unix(1_800_000_000, 0)
	g, err := sharding.NewGlobal(rdb, global.GCRA, sharding.Suffix, sharding.Fixed(2), sharding.WithPrefix(redistest.Prefix(t)),
		sharding.WithClock(func() time.Time { return frozen }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := hybridlimit.Limit{Rate: 20, Period: time.Second, Burst: 2} // parts: 10/s, burst 1
	for range 3 {
		if _, err := g.Allow(ctx, "k", limit); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // each part refills its token in 100ms
	if r, err := g.Allow(ctx, "k", limit); err != nil || !r.Allowed {
		t.Errorf("Allow 300ms after both parts denied = %+v, %v; Redis would admit", r, err)
	}
}

// TestGlobalDenialOfSplitKey denies a split key on every part: the result
// said nothing was left and the key would be full after the whole
// limit's refill time, where its parts held 8 tokens and would be full in
// 200s, or, for a fixed window of 1s, after 4s.
func TestGlobalDenialOfSplitKey(t *testing.T) {
	rdb := redistest.Standalone(t)
	ctx := context.Background()
	g, err := sharding.NewGlobal(rdb, global.TokenBucket, sharding.Suffix, sharding.Fixed(2), sharding.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	limit := hybridlimit.Limit{Rate: 10, Period: 1000 * time.Second, Burst: 10}
	for range 2 { // one token from each part: 4 left in each
		if r, err := g.Allow(ctx, "tb", limit); err != nil || !r.Allowed {
			t.Fatalf("Allow = %+v, %v", r, err)
		}
	}
	r, err := g.AllowN(ctx, "tb", limit, 5)
	if err != nil || r.Allowed {
		t.Fatalf("AllowN(5) with 4 tokens a part = %+v, %v; want denied", r, err)
	}
	if r.Remaining != 8 || r.ResetAfter > 200*time.Second || r.ResetAfter < r.RetryAfter || r.Source != hybridlimit.SourceGlobal {
		t.Errorf("denial = %+v; want 8 remaining, full within 200s, from Redis", r)
	}
	peek, err := g.Peek(ctx, "tb", limit)
	if err != nil || peek.Remaining != 8 || peek.Source != hybridlimit.SourceGlobal {
		t.Errorf("Peek = %+v, %v; want 8 remaining, from Redis", peek, err)
	}

	fw, err := sharding.NewGlobal(rdb, global.FixedWindow, sharding.Suffix, sharding.Fixed(2), sharding.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	window := hybridlimit.Limit{Rate: 4, Period: time.Minute, Burst: 4}
	for range 4 {
		if _, err := fw.Allow(ctx, "fw", window); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := fw.Allow(ctx, "fw", window); err != nil || (!r.Allowed && r.ResetAfter > time.Minute) {
		t.Errorf("denial of a split fixed window of a minute = %+v, %v; want it full again within the minute", r, err)
	}
}

// TestTimeLayoutOneShardIsWhole leaves a Time-layout key whole: it was
// kept as a part of one, apart from the keys a plain limiter with the same
// prefix uses, so the two counted the same key twice.
func TestTimeLayoutOneShardIsWhole(t *testing.T) {
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	now := time.Unix(1_800_000_000, 0)
	g, err := sharding.NewGlobal(rdb, global.FixedWindow, sharding.Time, sharding.Fixed(1),
		sharding.WithPrefix(prefix), sharding.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := global.New(rdb, global.FixedWindow, global.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := hybridlimit.PerMinute(3)
	for range 3 {
		if r, err := g.Allow(ctx, "k", limit); err != nil || !r.Allowed {
			t.Fatalf("Allow = %+v, %v", r, err)
		}
	}
	if r, err := plain.AllowAt(ctx, now, "k", limit, 1); err != nil || r.Allowed {
		t.Errorf("a plain limiter on the key a 1-shard Global exhausted = %+v, %v; want denied", r, err)
	}
	if r, err := g.Peek(ctx, "k", limit); err != nil || r.Remaining != 0 {
		t.Errorf("Peek = %+v, %v; want 0 remaining", r, err)
	}
}

// TestGlobalRetryAfterForCost drains a key split 2 ways and asks for costs
// above 1: each denial's RetryAfter is the wait the parts' rational model
// names for that cost (a part must hold it all), whether Redis is asked or
// the denial is remembered, and a larger cost than the one remembered
// waits longer.
func TestGlobalRetryAfterForCost(t *testing.T) {
	g, err := sharding.NewGlobal(redistest.Cluster(t), global.TokenBucket, sharding.Suffix, sharding.Fixed(2),
		sharding.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := hybridlimit.PerMinute(100) // parts of 50 a minute: a token each 1.2 s
	start := time.Now()
	for {
		r, err := g.Allow(ctx, "k", limit)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			break
		}
	}
	for _, cost := range []int64{10, 10, 20, 20, 50} {
		r, err := g.AllowN(ctx, "k", limit, cost)
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration(cost) * 1200 * time.Millisecond
		if since := time.Since(start); r.Allowed || r.RetryAfter > want || r.RetryAfter < want-since {
			t.Errorf("AllowN(%d) after a drain = %+v, want denied with RetryAfter %v less at most %v", cost, r, want, since)
		}
	}
}
