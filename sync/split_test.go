package sync_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
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
// more than that, beyond what the failure policy admitted: on a machine
// too busy to answer a fetch within the limiter's wait, FallbackLocal
// admits from its share, O(t) of design 6.3's bound (Redis takes it
// after, as debt).
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
	fellBack := int64(l.Stats().FallbackAllowed)
	s.Store(3)
	second := drain(t, l, "hot", limit, 1500*time.Millisecond)
	fellBackAfter := int64(l.Stats().FallbackAllowed) - fellBack
	t.Logf("admitted %d split 2 ways (%d by the failure policy), then %d more after the count became 3 (%d)", first, fellBack, second, fellBackAfter)
	if first > limit.Burst+fellBack || second > limit.Burst+fellBackAfter {
		t.Errorf("a frozen budget of %d admitted %d (%d by the failure policy), then %d (%d) after a shard-count change: more than one burst per layout",
			limit.Burst, first, fellBack, second, fellBackAfter)
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

// syncMessages counts, per Redis key, the key messages of the sync
// script's calls a client sends: a go-redis hook.
type syncMessages struct {
	mu stdsync.Mutex
	n  map[string]int64
}

func (*syncMessages) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *syncMessages) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd.Args())
		return next(ctx, cmd)
	}
}

func (h *syncMessages) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd.Args())
		}
		return next(ctx, cmds)
	}
}

func (h *syncMessages) count(args []any) {
	if len(args) < 3 || str(args[1]) != scripts.Sync.Hash() && str(args[1]) != scripts.Sync.Source() {
		return
	}
	nkeys, err := strconv.Atoi(str(args[2]))
	if err != nil {
		return
	}
	argv := args[3+nkeys:]
	h.mu.Lock()
	defer h.mu.Unlock()
	per := scripts.SyncMode(str(argv[2])).KeyArgs()
	for i := scripts.SyncHeaderArgs; i+per <= len(argv); i += per {
		h.n[str(argv[i])]++
	}
}

// str returns a command argument as a string; the limiter passes key names
// by pointer.
func str(v any) string {
	if p, ok := v.(*string); ok {
		return *p
	}
	return fmt.Sprint(v)
}

// TestSplitKeyCostsWhatWholeDid: eight instances ask a key far over its
// limit, on a clock the test moves a tick at a time, whole and then split
// 4 ways with two instances homed on each part. Split, the key may cost
// Redis its whole messages (each instance's home asks once a round, as the
// whole key did) and a fall-over an instance every four intervals, and its
// busiest part a quarter of that: the parts drain alike, each kept empty by
// its own instances, so an instance asking a sibling besides its home
// every round only adds messages for what the sibling's own instances
// would take.
func TestSplitKeyCostsWhatWholeDid(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	const (
		instances, shards = 8, 4
		interval          = 100 * time.Millisecond
		intervals         = 150
		perTick           = 10 // decisions per instance per tick: 32,000 a second against 2,000
	)
	limit := hybridlimit.PerSecond(2000)
	var ids []string
	homed := make([]int, shards)
	for n := 0; len(ids) < instances; n++ {
		id := fmt.Sprintf("costs-%d", n)
		if h := sharding.Home(id, "hot", shards); homed[h] < instances/shards {
			homed[h]++
			ids = append(ids, id)
		}
	}
	run := func(s int) (total int64, parts []int64) {
		prefix := redistest.Prefix(t)
		clk := clock.New(time.Now())
		hook := &syncMessages{n: map[string]int64{}}
		ls := make([]*hlsync.Limiter, len(ids))
		for i, id := range ids {
			c := srv.Client(t)
			c.AddHook(hook)
			// The round timeout runs on the wall clock: generous, so that
			// a loaded machine counts the same messages.
			ls[i] = clocked(t, c, clk, hlsync.WithPrefix(prefix), hlsync.WithInstanceID(id), hlsync.WithSyncInterval(interval, 0.1),
				hlsync.WithRoundTimeout(10*time.Second), hlsync.WithSplitKeys(func(string, hybridlimit.Limit) int { return s }))
		}
		ctx := context.Background()
		for range intervals * 4 {
			clk.Advance(interval / 4)
			for _, l := range ls {
				for range perTick {
					if _, err := l.Allow(ctx, "hot", limit); err != nil {
						t.Fatal(err)
					}
				}
				r := l.BeginRound()
				if err := r.Send(ctx); err != nil {
					t.Fatal(err)
				}
				r.Finish()
			}
		}
		parts = make([]int64, s)
		for j := range s {
			bucket, _ := ls[0].PartKeys("hot", j, s, 0)
			parts[j] = hook.n[bucket]
			total += parts[j]
		}
		return total, parts
	}
	whole, _ := run(1)
	split, parts := run(shards)
	busiest := slices.Max(parts)
	fallOvers := int64(instances * intervals / 2) // a turn every other interval: fallOverEvery
	t.Logf("sync messages of a key over its limit, %d instances, %d intervals: whole %d, split %d ways %d %v (busiest part %.2f of whole)",
		instances, intervals, whole, shards, split, parts, float64(busiest)/float64(whole))
	if want := 1.1 * float64(whole+fallOvers); float64(split) > want {
		t.Errorf("split %d ways: %d messages, want at most %.0f: the whole key's %d and %d fall-overs, and 10%%", shards, split, want, whole, fallOvers)
	}
	if want := 1.1 * float64(whole+fallOvers) / shards; float64(busiest) > want {
		t.Errorf("split %d ways: busiest part %d messages, want at most %.0f: a %dth of the whole key's %d and %d fall-overs, and 10%%",
			shards, busiest, want, shards, whole, fallOvers)
	}
}

// TestSplitKeySpendsPartsNoOneCallsHome: one instance asks a frozen budget
// of 400 split 4 ways, on a clock the test moves a tick at a time. Three
// parts are no instance's home, and only fall-overs reach them: turning to
// a part at most every four intervals, and staying with it while it has
// tokens to spare, the instance spends all 400, and no more.
func TestSplitKeySpendsPartsNoOneCallsHome(t *testing.T) {
	redistest.NoLeaks(t)
	clk := clock.New(time.Now())
	const interval = 100 * time.Millisecond
	l := clocked(t, redistest.Standalone(t), clk, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithSyncInterval(interval, 0.1),
		answeredRounds, hlsync.WithSplitKeys(func(string, hybridlimit.Limit) int { return 4 }))
	ctx := context.Background()
	limit := frozen(400)
	var admitted, ticks int
	for ; ticks < 4*100 && admitted < 400; ticks++ {
		clk.Advance(interval / 4)
		for range 10 {
			r, err := l.Allow(ctx, "hot", limit)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				admitted++
			}
		}
		r := l.BeginRound()
		if err := r.Send(ctx); err != nil {
			t.Fatal(err)
		}
		r.Finish()
	}
	for range 40 { // and nothing more
		clk.Advance(interval / 4)
		if r, err := l.Allow(ctx, "hot", limit); err != nil || r.Allowed {
			t.Fatalf("after the budget: %+v, %v; want denied", r, err)
		}
		r := l.BeginRound()
		if err := r.Send(ctx); err != nil {
			t.Fatal(err)
		}
		r.Finish()
	}
	t.Logf("admitted %d of 400 in %d intervals, %d messages", admitted, ticks/4, l.Stats().Messages)
	if admitted != 400 {
		t.Errorf("admitted %d of a frozen budget of 400 in %d intervals, want all of it", admitted, ticks/4)
	}
}
