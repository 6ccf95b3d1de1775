package sync_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
	"github.com/hybridlimit/hybridlimit/sharding"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// partsLeft asks Redis for the whole tokens left in every part of a split
// key, through the sync script with messages that grant nothing.
func partsLeft(t *testing.T, c hybridlimit.Redis, prefix, key string, limit hybridlimit.Limit, s, gen int) []int64 {
	t.Helper()
	probe, err := hlsync.New(c, hlsync.WithPrefix(prefix), hlsync.WithInstanceID("probe"))
	if err != nil {
		t.Fatal(err)
	}
	left := make([]int64, s)
	for j := range s {
		p := sharding.Part(limit, j, s)
		bucket, allow := probe.PartKeys(key, j, s, gen)
		route, args := scripts.SyncCall(scripts.SyncHeader{LedgerTTLMS: 60000, Mode: scripts.ModeReserve, Instance: "probe", AllowanceLifeUS: 1000},
			scripts.SyncKey{Bucket: bucket, Allowances: allow, Msg: scripts.SyncMsg{Rate: p.Rate, PeriodUS: p.Period.Microseconds(), Burst: p.Burst, Seq: 1, Epoch: 1, Budget: -1}})
		reply, err := scripts.Sync.Run(context.Background(), c, route, args...)
		if err != nil {
			t.Fatal(err)
		}
		var v [1]scripts.SyncReply
		if err := scripts.ParseSyncReplies(reply, v[:]); err != nil {
			t.Fatal(err)
		}
		left[j] = v[0].Remaining
	}
	return left
}

func split(s int) hlsync.Option {
	return hlsync.WithSplitKeys(func(key string, _ hybridlimit.Limit) int {
		if key == "hot" {
			return s
		}
		return 1
	})
}

// TestShardedReserveExact splits a hot key 3 ways on the cluster and
// hammers it from 4 instances: together they admit exactly the budget, and
// after Close what they admitted plus what the parts hold is the budget.
func TestShardedReserveExact(t *testing.T) {
	redistest.NoLeaks(t)
	newClient := clients(t, true)
	prefix := redistest.Prefix(t)
	const burst = 3000
	limit := frozen(burst)
	// A round timeout well above the interval, and failing closed: on a
	// loaded machine a slow round must not hand decisions to the failure
	// policy, which other tests cover; this one is about the parts'
	// accounting.
	ls := newLimiters(t, 4, newClient, hlsync.WithPrefix(prefix), hlsync.WithSyncInterval(100*time.Millisecond, 0.1),
		hlsync.WithRoundTimeout(2*time.Second), hlsync.WithFailurePolicy(hybridlimit.FailClosed), split(3))
	admitted, err := hammer(ls, 8, "hot", limit, burst, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if s, _ := l.Layout("hot"); s != 3 || l.Stats().SplitKeys != 1 {
			t.Errorf("%s: layout %d parts, SplitKeys %d; want 3 parts of one split key", l.InstanceID(), s, l.Stats().SplitKeys)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	total := sum(admitted)
	left := partsLeft(t, newClient(), prefix, "hot", limit, 3, 0)
	t.Logf("admitted %d of %d (per instance %v), left in the parts %v", total, burst, admitted, left)
	if total != burst {
		t.Errorf("admitted %d, want exactly the budget %d", total, burst)
	}
	if total+sum(left) != burst {
		t.Errorf("admitted %d + left %v != %d: tokens lost or made", total, left, burst)
	}
	for _, l := range ls {
		if s := l.Stats(); s.Owed != 0 {
			t.Errorf("%s: Owed %d after Close", l.InstanceID(), s.Owed)
		}
	}
	noTTL, seen := redistest.KeysWithoutTTL(t, redistest.Cluster(t), prefix)
	if seen == 0 || len(noTTL) > 0 {
		t.Errorf("keys seen %d, without TTL %v", seen, noTTL)
	}
}

// TestShardedSpreadsOverMasters is the cluster proof for the hybrid: a key
// split 3 ways keeps its parts on the three masters, and the sync traffic
// of one key over its limit, from six instances homed two on each part,
// spreads over them within 1.5x, where whole it all goes to one. The
// instances' ids are chosen for their homes: an instance's home part is
// a hash of its id and the key, so six random ids home two on each part
// only one time in eight, and otherwise the traffic leans to the parts
// that more instances call home.
func TestShardedSpreadsOverMasters(t *testing.T) {
	redistest.NoLeaks(t)
	cluster := redistest.ClusterOf(t)
	cc := cluster.Client(t)
	owners := redistest.SlotOwners(t, cc)
	probe, err := hlsync.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{2, 3, 4} {
		on := make(map[string]bool)
		for j := range s {
			bucket, _ := probe.PartKeys("hot", j, s, 0)
			slot, err := cc.ClusterKeySlot(context.Background(), bucket).Result()
			if err != nil {
				t.Fatal(err)
			}
			on[owners[int(slot)]] = true
		}
		if len(on) != min(s, 3) {
			t.Errorf("%d parts on %d masters", s, len(on))
		}
	}

	limit := hybridlimit.PerSecond(3000)
	var ids []string
	homed := make([]int, 3)
	for n := 0; len(ids) < 6; n++ {
		id := fmt.Sprintf("spread-%d", n)
		if h := sharding.Home(id, "hot", 3); homed[h] < 2 {
			homed[h]++
			ids = append(ids, id)
		}
	}
	spread := func(shards int) []float64 {
		prefix := redistest.Prefix(t)
		ls := make([]*hlsync.Limiter, len(ids))
		for i := range ls {
			// No loop: Sync below runs the rounds, so the only scripts
			// are the sync script's, not presence.
			ls[i], err = hlsync.New(cluster.Client(t), hlsync.WithPrefix(prefix), hlsync.WithInstanceID(ids[i]),
				hlsync.WithSyncInterval(50*time.Millisecond, 0.1), split(shards))
			if err != nil {
				t.Fatal(err)
			}
		}
		before := redistest.CommandCalls(t, cc, "evalsha", "eval")
		// Each instance runs the same number of rounds, 12 ms apart, its
		// decisions going on until every instance is done: the calls per
		// master then follow the layout, not which instances a loaded
		// machine happens to run more often in a fixed time.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var rounds, deciders stdsync.WaitGroup
		for _, l := range ls {
			rounds.Go(func() {
				for range 25 {
					_ = l.Sync(context.Background())
					time.Sleep(12 * time.Millisecond)
				}
			})
			for range 2 {
				deciders.Go(func() {
					for ctx.Err() == nil {
						if _, err := l.Allow(ctx, "hot", limit); err != nil && !errors.Is(err, context.Canceled) {
							t.Error(err)
							return
						}
					}
				})
			}
		}
		rounds.Wait()
		cancel()
		deciders.Wait()
		after := redistest.CommandCalls(t, cc, "evalsha", "eval")
		for _, l := range ls {
			_ = l.Close(context.Background())
		}
		var calls []float64
		for addr, n := range after {
			calls = append(calls, float64(n-before[addr]))
		}
		return calls
	}
	whole := spread(1)
	parts := spread(3)
	t.Logf("sync script calls per master, one key over its limit, 6 instances: whole %v, split 3 ways %v", whole, parts)
	if lo, hi := minOf(whole), maxOf(whole); hi == 0 || lo > 0.05*hi {
		t.Errorf("whole key: calls per master %v, want all on one", whole)
	}
	if lo, hi := minOf(parts), maxOf(parts); lo == 0 || hi/lo > 1.5 {
		t.Errorf("split 3 ways: calls per master %v, want within 1.5x", parts)
	}
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func TestShardsBadConfig(t *testing.T) {
	c := redistest.Standalone(t)
	if _, err := hlsync.New(c, hlsync.WithSplitKeys(nil)); err == nil {
		t.Error("nil shard function accepted")
	}
	if _, err := hlsync.New(c, hlsync.WithMode(hlsync.Optimistic), split(2)); err == nil {
		t.Error("shards in Optimistic mode accepted")
	}
	for _, s := range []int{0, -1, sharding.MaxShards + 1} {
		l, err := hlsync.New(c, split(s))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Allow(context.Background(), "hot", hybridlimit.PerSecond(100)); !errors.Is(err, sharding.ErrInvalidShards) {
			t.Errorf("%d shards: err = %v", s, err)
		}
		_ = l.Close(context.Background())
	}
	l, err := hlsync.New(c, split(4))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if _, err := l.AllowN(context.Background(), "hot", hybridlimit.PerSecond(100), 26); !errors.Is(err, hybridlimit.ErrCostExceedsBurst) {
		t.Errorf("cost 26 over parts of 25: err = %v", err)
	}
}

// TestAutoSplitMovesEveryToken lets automatic sharding split a hot key and
// merge it back while 4 instances spend its budget on the cluster: every
// instance follows the layout in Redis, and across both moves no token is
// lost or made: together they admit exactly the budget.
func TestAutoSplitMovesEveryToken(t *testing.T) {
	defaultBuildOnly(t)
	redistest.NoLeaks(t)
	newClient := clients(t, true)
	prefix := redistest.Prefix(t)
	const budget = 20000
	limit := frozen(budget)
	auto := hlsync.WithAutoSplit(hlsync.AutoSplit{Max: 3, Above: 40, Below: 30, Hold: 300 * time.Millisecond})
	// A round timeout well above the interval, and failing closed, as in
	// TestShardedReserveExact.
	ls := newLimiters(t, 4, newClient, hlsync.WithPrefix(prefix), hlsync.WithSyncInterval(50*time.Millisecond, 0.1),
		hlsync.WithRoundTimeout(2*time.Second), hlsync.WithFailurePolicy(hybridlimit.FailClosed), auto)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 15s", what)
			}
		}
	}
	layouts := func() (shards []int) {
		for _, l := range ls {
			s, _ := l.Layout("hot")
			shards = append(shards, s)
		}
		return shards
	}
	agree := func(want int) func() bool {
		return func() bool {
			for _, s := range layouts() {
				if s != want {
					return false
				}
			}
			return true
		}
	}
	reshards := func() (n uint64) {
		for _, l := range ls {
			n += l.Stats().Reshards
		}
		return n
	}

	// Hot: demand from every instance until the key is split 3 ways and
	// every instance knows it. Paced, at most a tenth of the budget a
	// second in all: the frozen key is under the low-limit rule, so each
	// decision fetches from Redis and the messages make it hot at any
	// pace, but unpaced a fast machine spends the whole budget before the
	// first check window (a second) closes, and an instance told its
	// frozen bucket is empty sends nothing more, so it never hears of the
	// split (and with no tokens left, nothing would move).
	ctx, cancel := context.WithCancel(context.Background())
	var admitted [4]int64
	var wg stdsync.WaitGroup
	// A failed wait must still stop the workers, or they spin on closed
	// limiters through every later test of the package.
	defer wg.Wait()
	defer cancel()
	for i, l := range ls {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if r, err := l.Allow(ctx, "hot", limit); err == nil && r.Allowed {
						atomicAdd(&admitted[i], 1)
					}
					time.Sleep(8 * time.Millisecond) // 16 goroutines: at most 2,000 a second
				}
			}()
		}
	}
	waitFor("split", agree(3))
	cancel()
	wg.Wait()
	afterSplit := reshards()
	t.Logf("split after %d admitted; layouts %v", sumArr(admitted[:]), layouts())

	// Cool: a trickle, a request per instance every half second, keeps
	// the key tracked until it is merged back.
	var last time.Time
	waitFor("merge", func() bool {
		if time.Since(last) > 500*time.Millisecond {
			for _, l := range ls {
				_, _ = l.Allow(context.Background(), "hot", limit)
			}
			last = time.Now()
		}
		return reshards() > afterSplit && agree(1)()
	})
	rest, err := hammer(ls, 8, "hot", limit, budget, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s, gen := ls[0].Layout("hot")
	for _, l := range ls {
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// After Close every instance has handed back what it held: what the
	// parts hold is what was not admitted, so a shortfall below is a slow
	// run, not a lost token, if admitted + left is the budget.
	left := partsLeft(t, newClient(), prefix, "hot", limit, s, gen)
	var total, moves uint64
	for _, l := range ls {
		s := l.Stats()
		total += s.Admitted
		moves += s.Moves
		if s.Owed != 0 {
			t.Errorf("%s: Owed %d after Close", l.InstanceID(), s.Owed)
		}
	}
	t.Logf("admitted %d of %d (last phase %v), %d reshards, %d moves; left in layout %d.%d: %v", total, budget, rest, reshards(), moves, s, gen, left)
	if int64(total)+sum(left) != budget {
		t.Errorf("admitted %d + left %v != %d: tokens lost or made in the moves", total, left, budget)
	}
	if total != budget {
		t.Errorf("admitted %d over a split and a merge, want exactly the budget %d", total, budget)
	}
	if moves < 8 {
		t.Errorf("%d moves, want every instance moved twice", moves)
	}
	noTTL, seen := redistest.KeysWithoutTTL(t, redistest.Cluster(t), prefix)
	if seen == 0 || len(noTTL) > 0 {
		t.Errorf("keys seen %d, without TTL %v", seen, noTTL)
	}
}

func atomicAdd(p *int64, n int64) { atomic.AddInt64(p, n) }

func sumArr(v []int64) (s int64) {
	for _, x := range v {
		s += atomic.LoadInt64(&x)
	}
	return s
}

// TestSplitKeyMarkersRenewed drives automatic sharding by hand on a clock
// the test moves: a hot key is split, and while it stays split the
// markers its configured layout's buckets hold, which point instances to
// the new layout, are renewed a quarter of their life before they would
// lapse: a marker gone would read as a full bucket to a new instance.
func TestSplitKeyMarkersRenewed(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	clk := clock.New(time.Now())
	auto := hlsync.WithAutoSplit(hlsync.AutoSplit{Max: 3, Above: 2, Below: 1, Hold: time.Hour})
	l := clocked(t, rdb, clk, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithSyncInterval(100*time.Millisecond, 0), answeredRounds, auto)
	ctx := context.Background()
	limit := hybridlimit.PerSecond(100_000) // markers live 10 minutes: twice its refill time is less
	step := stepper(t, l, clk)
	splitByHand(t, l, step, limit)
	s, gen := l.Layout("hot")
	marker, _ := l.Keys("hot") // the configured layout: the whole key's bucket
	want := fmt.Sprintf("m%d.%d", s, gen)
	if got, err := rdb.HGet(ctx, marker, "t").Result(); err != nil || got != want {
		t.Fatalf("configured bucket after the split = %q, %v; want the marker %q", got, err, want)
	}
	// Shorten the marker's life to see its renewal: a quarter of the
	// marker's life (10 minutes) later it must be long again.
	if err := rdb.PExpire(ctx, marker, 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	step(time.Second)
	if ttl := rdb.PTTL(ctx, marker).Val(); ttl > 30*time.Second {
		t.Fatalf("marker renewed after 1s: TTL %v", ttl)
	}
	step(3 * time.Minute)
	if ttl := rdb.PTTL(ctx, marker).Val(); ttl < 5*time.Minute {
		t.Errorf("marker TTL %v a quarter life after the split, want it renewed to about 10m", ttl)
	}
	if got := rdb.HGet(ctx, marker, "t").Val(); got != want {
		t.Errorf("marker after renewal = %q, want %q", got, want)
	}
	if s2, gen2 := l.Layout("hot"); s2 != s || gen2 != gen {
		t.Errorf("layout after renewal = %d.%d, want %d.%d: a key held hot must stay split", s2, gen2, s, gen)
	}
}

// failOp fails every reshard step of op, as if the connection to Redis
// broke there.
func failOp(op string) *redistest.CommandHook {
	return &redistest.CommandHook{Args: []string{op}, Before: func() error { return fmt.Errorf("injected: connection lost at reshard %s", op) }}
}

// TestReshardInterruptedNeverOverAdmits splits a key whose move fails
// after the old part is closed, before its tokens are credited to the new
// parts: the tokens it held are out of circulation (until its marker
// lapses), so the key under-admits, and never admits more than its
// budget; another instance still follows the marker to the new layout.
func TestReshardInterruptedNeverOverAdmits(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	ca, cb := srv.Client(t), srv.Client(t)
	ca.AddHook(failOp("credit"))
	prefix := redistest.Prefix(t)
	clk := clock.New(time.Now())
	auto := hlsync.WithAutoSplit(hlsync.AutoSplit{Max: 3, Above: 2, Below: 1, Hold: time.Hour})
	a, err := hlsync.New(ca, hlsync.WithPrefix(prefix), hlsync.WithClock(clk), hlsync.WithInstanceID("a"),
		hlsync.WithSyncInterval(100*time.Millisecond, 0), auto)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hlsync.New(cb, hlsync.WithPrefix(prefix), hlsync.WithInstanceID("b"), auto)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { _ = a.Close(ctx); _ = b.Close(ctx) })
	const budget = 3000
	limit := frozen(budget)
	spent := &spender{t: t, key: "hot", limit: limit}
	decide := spent.admit
	for i := 0; ; i++ {
		decide(a, 10)
		clk.Advance(100 * time.Millisecond)
		if err := a.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		err := a.Reshard(ctx)
		if s, _ := a.Layout("hot"); s > 1 {
			if err == nil || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("Reshard with its credit step failing = %v, want the injected error", err)
			}
			break
		}
		if i == 100 {
			t.Fatalf("the key was not split: %+v", a.Stats())
		}
	}
	before := spent.admitted
	// Both instances ask for everything that might be left.
	for range 400 {
		decide(a, 10)
		decide(b, 10)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sa, ga := a.Layout("hot")
	if sb, gb := b.Layout("hot"); sb != sa || gb != ga {
		t.Errorf("instance b on layout %d.%d, a on %d.%d: b did not follow the marker", sb, gb, sa, ga)
	}
	t.Logf("admitted %d before the split, %d in all, of a budget of %d", before, spent.admitted, budget)
	if spent.admitted > budget {
		t.Fatalf("admitted %d, more than the budget %d", spent.admitted, budget)
	}
	if spent.admitted == budget {
		t.Errorf("admitted the whole budget: the interrupted move lost nothing, so the test did not interrupt it")
	}
}

// TestFollowerReachesCreditedParts splits a key while another instance,
// sent to the new layout by the old part's marker, asks every new part
// before the mover has credited them: Redis says each is empty. Once
// credited they hold what the old part held, and the follower must get
// to it. The limit is frozen (no refill): believing "empty until a token
// is due" denied such a follower for a year, and stranded the tokens
// (TestAutoSplitMovesEveryToken stalled this way on a loaded machine).
func TestFollowerReachesCreditedParts(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	ca, cb := srv.Client(t), srv.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	auto := hlsync.WithAutoSplit(hlsync.AutoSplit{Max: 3, Above: 2, Below: 1, Hold: time.Hour})
	b, err := hlsync.New(cb, hlsync.WithPrefix(prefix), hlsync.WithInstanceID("b"),
		hlsync.WithSyncInterval(50*time.Millisecond, 0), auto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(ctx) })
	const budget = 3000
	limit := frozen(budget)
	spent := &spender{t: t, key: "hot", limit: limit}
	// Before the credit: b follows the marker and, over several of its
	// intervals, finds home and both siblings empty.
	var once stdsync.Once
	ca.AddHook(&redistest.CommandHook{Args: []string{"credit"}, Before: func() error {
		once.Do(func() {
			for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); {
				spent.admit(b, 10)
				time.Sleep(5 * time.Millisecond)
			}
		})
		return nil
	}})
	clk := clock.New(time.Now())
	a := clocked(t, ca, clk, hlsync.WithPrefix(prefix), hlsync.WithInstanceID("a"),
		hlsync.WithSyncInterval(100*time.Millisecond, 0), hlsync.WithRoundTimeout(5*time.Second), auto)
	for i := 0; ; i++ {
		spent.admit(a, 10)
		clk.Advance(100 * time.Millisecond)
		if err := a.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Reshard(ctx); err != nil {
			t.Fatal(err)
		}
		if s, _ := a.Layout("hot"); s > 1 {
			break
		}
		if i == 100 {
			t.Fatalf("the key was not split: %+v", a.Stats())
		}
	}
	if s, _ := b.Layout("hot"); s != 3 {
		t.Fatalf("b on %d parts before the credit, want 3: it did not follow the marker in time", s)
	}
	before := spent.admitted
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && spent.admitted == before; {
		spent.admit(b, 10)
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("admitted %d before the credit, %d in all, of %d", before, spent.admitted, budget)
	if spent.admitted == before {
		t.Errorf("b admitted nothing in 2s after the credit, with %d of %d tokens in the parts", budget-before, budget)
	}
	if spent.admitted > budget {
		t.Errorf("admitted %d, more than the budget %d", spent.admitted, budget)
	}
}

// TestReshardWhileRoundInFlight splits a key while one of the instance's
// own rounds is in flight: Redis has granted the round's top-up from the
// whole key's bucket before the split closed it, and the reply arrives
// after the instance moved its allowance to the new parts. The tokens the
// reply brings are the instance's, so they move too: what the instance
// admits plus what the parts hold after Close is the budget.
func TestReshardWhileRoundInFlight(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	clk := clock.New(time.Now())
	l := resharder(t, rdb, clk, prefix, "a")
	ctx := context.Background()
	const budget = 3000
	limit := frozen(budget)
	spent := &spender{t: t, key: "hot", limit: limit}
	admit := func(cost int64) { spent.admit(l, cost) }
	step := func() {
		t.Helper()
		clk.Advance(100 * time.Millisecond)
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Reshard(ctx); err != nil { // opens the first check window
		t.Fatal(err)
	}
	for range 12 { // a check window of messages: the key is hot
		admit(10)
		step()
	}
	// Spend what the key holds, and let time pass until a round tops it
	// up: a lease stretched while the bucket has room lasts many rounds,
	// and the key is looked at again within maxQuiet intervals.
	admit(l.Stats().Outstanding)
	var r hlsync.Round
	for i := 0; ; i++ {
		clk.Advance(100 * time.Millisecond)
		if r = l.BeginRound(); r.Messages() == 1 {
			break
		}
		r.Finish()
		if i == 20 {
			t.Fatalf("no round carries the key's top-up in 2s: %+v", l.Stats())
		}
	}
	if err := r.Send(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Reshard(ctx); err != nil {
		t.Fatal(err)
	}
	r.Finish()
	s, gen := l.Layout("hot")
	if s != 3 || l.Stats().Reshards != 1 {
		t.Fatalf("layout %d.%d, %d reshards; want the key split 3 ways", s, gen, l.Stats().Reshards)
	}
	for range 100 {
		for range 50 {
			admit(1)
		}
		step()
	}
	st := l.Stats()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	left := partsLeft(t, rdb, prefix, "hot", limit, s, gen)
	t.Logf("admitted %d (Stats %d), left in the parts %v, of %d", spent.admitted, st.Admitted, left, budget)
	if spent.admitted+sum(left) != budget {
		t.Errorf("admitted %d + left %v = %d, want the budget %d: tokens lost in the move", spent.admitted, left, spent.admitted+sum(left), budget)
	}
	if st.Admitted != uint64(spent.admitted) {
		t.Errorf("Stats.Admitted = %d, want %d", st.Admitted, spent.admitted)
	}
}

// TestMergedKeyStaysMerged drives automatic sharding by hand on a clock
// the test moves: a hot key is split, cools and is merged back, and then
// stays as it is while it stays cool, however many holds pass: a key back
// in its configured parts has nothing to merge, and moving it again to a
// new generation would cost every instance a move for nothing.
func TestMergedKeyStaysMerged(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	clk := clock.New(time.Now())
	// Hot at 5 messages a second: splitByHand sends 10, and the merged
	// key, idle, was seen to send 3 in one window on a loaded machine
	// (its bucket refills on Redis's clock, not the test's).
	auto := hlsync.WithAutoSplit(hlsync.AutoSplit{Max: 3, Above: 5, Below: 1, Hold: time.Second})
	l := clocked(t, rdb, clk, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithSyncInterval(100*time.Millisecond, 0), answeredRounds, auto)
	ctx := context.Background()
	limit := hybridlimit.PerSecond(100_000)
	step := stepper(t, l, clk)
	splitByHand(t, l, step, limit)
	for i := 0; ; i++ { // cool: no demand
		step(100 * time.Millisecond)
		if s, _ := l.Layout("hot"); s == 1 {
			break
		}
		if i == 100 {
			t.Fatalf("the key was not merged back: %+v", l.Stats())
		}
	}
	_, gen := l.Layout("hot")
	var sent []uint64 // messages a step, after the merge
	// Five holds, cool.
	for range 50 {
		before := l.Stats().Messages
		step(100 * time.Millisecond)
		sent = append(sent, l.Stats().Messages-before)
	}
	if s, g := l.Layout("hot"); s != 1 || g != gen || l.Stats().Reshards != 2 {
		t.Errorf("after five cool holds: layout %d.%d, %d reshards; want 1.%d, 2 (the split and the merge); messages a step %v",
			s, g, l.Stats().Reshards, gen, sent)
	}
	marker, _ := l.Keys("hot")
	if got, want := rdb.HGet(ctx, marker, "t").Val(), fmt.Sprintf("m1.%d", gen); got != want {
		t.Errorf("configured bucket = %q, want the marker %q", got, want)
	}
}

// TestCloseAfterReshardHandsBackAll closes an instance whose key another
// instance has just split: its final round returns its lease to the old
// layout's bucket, now closed, whose reply sends the key to the new
// layout with the lease; that lease must go back to the new parts too, not
// stay with the closed limiter. What both admitted plus what the parts
// hold is the budget.
func TestCloseAfterReshardHandsBackAll(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	clk := clock.New(time.Now())
	a, b := resharder(t, rdb, clk, prefix, "a"), resharder(t, rdb, clk, prefix, "b")
	ctx := context.Background()
	const budget = 3000
	limit := frozen(budget)
	spent := &spender{t: t, key: "hot", limit: limit}
	admit := spent.admit
	admit(b, 1) // b leases ahead and keeps the rest
	if b.Stats().Outstanding == 0 {
		t.Fatal("b holds nothing: nothing to hand back")
	}
	if err := a.Reshard(ctx); err != nil { // opens the first check window
		t.Fatal(err)
	}
	for range 12 { // a check window of a's messages: the key is hot
		admit(a, 10)
		if n := a.Stats().Outstanding; n > 0 {
			admit(a, n) // spent: the next round tops up
		}
		clk.Advance(100 * time.Millisecond)
		if err := a.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Reshard(ctx); err != nil {
		t.Fatal(err)
	}
	s, gen := a.Layout("hot")
	if s != 3 {
		t.Fatalf("a's layout %d.%d: the key was not split", s, gen)
	}
	if s, _ := b.Layout("hot"); s != 1 {
		t.Fatalf("b already on %d parts: it must learn of the split from its final round", s)
	}
	held := b.Stats().Outstanding
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	left := partsLeft(t, rdb, prefix, "hot", limit, s, gen)
	t.Logf("admitted %d, b held %d at Close, left in the parts %v, of %d", spent.admitted, held, left, budget)
	if spent.admitted+sum(left) != budget {
		t.Errorf("admitted %d + left %v = %d, want the budget %d: a lease was lost at Close", spent.admitted, left, spent.admitted+sum(left), budget)
	}
}

// resharder returns a limiter called id for the hand-driven reshard tests:
// on clk, a round every 100ms without jitter, splitting a key up to 3 ways
// when it is hot, and without the low-limit rule, so that a frozen key
// leases ahead and a round tops it up without a decision waiting for it.
func resharder(t *testing.T, rdb hybridlimit.Redis, clk *clock.Virtual, prefix, id string) *hlsync.Limiter {
	t.Helper()
	return clocked(t, rdb, clk, hlsync.WithPrefix(prefix), hlsync.WithInstanceID(id),
		hlsync.WithSyncInterval(100*time.Millisecond, 0), hlsync.WithLowLimitThreshold(0), answeredRounds,
		hlsync.WithAutoSplit(hlsync.AutoSplit{Max: 3, Above: 0.5, Below: 0.25, Hold: time.Hour}))
}

// spender makes decisions on one key for a test that counts what they
// admit against a budget.
type spender struct {
	t        *testing.T
	key      string
	limit    hybridlimit.Limit
	admitted int64
}

// admit asks l for cost and counts it if admitted.
func (s *spender) admit(l *hlsync.Limiter, cost int64) {
	s.t.Helper()
	r, err := l.AllowN(context.Background(), s.key, s.limit, cost)
	if err != nil {
		s.t.Fatal(err)
	}
	if r.Allowed {
		s.admitted += cost
	}
}

// TestSplitLeaseReturnsToAllParts splits a key while this instance holds a
// large lease of it, then closes: the lease moves to the new layout and
// goes back at Close. One part holds only its share of the burst, so the
// lease must go back to all parts in proportion, or the part it lands in
// overflows and the excess is lost. What was admitted plus what the parts
// hold is the budget.
func TestSplitLeaseReturnsToAllParts(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	clk := clock.New(time.Now())
	l := resharder(t, rdb, clk, prefix, "a")
	ctx := context.Background()
	const budget = 3000
	limit := frozen(budget)
	spent := &spender{t: t, key: "hot", limit: limit}
	if err := l.Reshard(ctx); err != nil { // opens the first check window
		t.Fatal(err)
	}
	for range 12 { // a check window at a steady demand, far under the budget
		spent.admit(l, 10)
		clk.Advance(100 * time.Millisecond)
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held := l.Stats().Outstanding
	if err := l.Reshard(ctx); err != nil {
		t.Fatal(err)
	}
	s, gen := l.Layout("hot")
	if s != 3 {
		t.Fatalf("layout %d.%d: the key was not split", s, gen)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	left := partsLeft(t, rdb, prefix, "hot", limit, s, gen)
	t.Logf("admitted %d, %d held at the split, left in the parts %v, of %d", spent.admitted, held, left, budget)
	// One part's room after the split: its third of the budget less its
	// third of what the whole bucket held.
	if room := (spent.admitted + held) / 3; held <= room {
		t.Fatalf("held %d at the split: too little to overflow one part, the test proves nothing", held)
	}
	if spent.admitted+sum(left) != budget {
		t.Errorf("admitted %d + left %v = %d, want the budget %d: the lease overflowed its part", spent.admitted, left, spent.admitted+sum(left), budget)
	}
}

// stepper returns a function that moves clk by d and runs l's round and
// automatic sharding, as the loop would.
func stepper(t *testing.T, l *hlsync.Limiter, clk *clock.Virtual) func(d time.Duration) {
	return func(d time.Duration) {
		t.Helper()
		clk.Advance(d)
		if err := l.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := l.Reshard(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// splitByHand spends 1000 tokens of key "hot" every 100ms step until l
// splits it, or fails the test after 100 steps.
func splitByHand(t *testing.T, l *hlsync.Limiter, step func(time.Duration), limit hybridlimit.Limit) {
	t.Helper()
	for i := 0; ; i++ {
		if _, err := l.AllowN(context.Background(), "hot", limit, 1000); err != nil {
			t.Fatal(err)
		}
		step(100 * time.Millisecond)
		if s, _ := l.Layout("hot"); s > 1 {
			return
		}
		if i == 100 {
			t.Fatalf("the key was not split: %+v", l.Stats())
		}
	}
}

// TestStaleMergeLeavesMergedBucket lets an instance that has not heard of
// a merge try the same merge after another instance made it: it opened
// the merged bucket again, emptying it (a full bucket reads as absent;
// 1,000 tokens -> 7), and only then found the old parts closed and said
// nothing moved. It must find that out before it touches anything.
func TestStaleMergeLeavesMergedBucket(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	clk := clock.New(time.Now())
	ctx := context.Background()
	mk := func(id string, hold time.Duration) *hlsync.Limiter {
		return clocked(t, rdb, clk, hlsync.WithPrefix(prefix), hlsync.WithInstanceID(id),
			hlsync.WithSyncInterval(100*time.Millisecond, 0), answeredRounds,
			hlsync.WithAutoSplit(hlsync.AutoSplit{Max: 3, Above: 2, Below: 1, Hold: hold}))
	}
	a, b := mk("a", time.Second), mk("b", 3*time.Second)
	limit := hybridlimit.PerSecond(1000)
	step := func() (errA, errB error) {
		clk.Advance(100 * time.Millisecond)
		if err := a.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		return a.Reshard(ctx), b.Reshard(ctx)
	}
	for i := 0; ; i++ {
		if _, err := a.AllowN(ctx, "hot", limit, 100); err != nil {
			t.Fatal(err)
		}
		if errA, _ := step(); errA != nil {
			t.Fatal(errA)
		}
		if s, _ := a.Layout("hot"); s > 1 {
			break
		}
		if i == 100 {
			t.Fatalf("not split: %+v", a.Stats())
		}
	}
	if _, err := b.AllowN(ctx, "hot", limit, 1); err != nil { // b follows to the split layout
		t.Fatal(err)
	}
	if s, g := b.Layout("hot"); s != 3 {
		t.Fatalf("b on %d.%d, want the split layout", s, g)
	}
	time.Sleep(1100 * time.Millisecond) // the parts refill, by Redis's clock
	var gen int
	for i := 0; ; i++ {
		if errA, errB := step(); errA != nil || errB != nil {
			t.Fatalf("a: %v, b: %v before a merged", errA, errB)
		}
		if s, g := a.Layout("hot"); s == 1 {
			gen = g
			break
		}
		if i == 100 {
			t.Fatalf("a did not merge: %+v", a.Stats())
		}
	}
	time.Sleep(50 * time.Millisecond) // the merged bucket is full again
	before := partsLeft(t, rdb, prefix, "hot", limit, 1, gen)[0]
	var errB error
	for i := 0; errB == nil; i++ {
		clk.Advance(100 * time.Millisecond)
		errB = b.Reshard(ctx)
		if i == 100 {
			t.Fatal("b never tried to merge")
		}
	}
	after := partsLeft(t, rdb, prefix, "hot", limit, 1, gen)[0]
	if !errors.Is(errB, hlsync.ErrReshardRace) {
		t.Fatalf("b's merge = %v, want ErrReshardRace", errB)
	}
	if after < before-50 {
		t.Errorf("b's merge, which moved nothing (%v), emptied the merged bucket: %d -> %d tokens", errB, before, after)
	}
}
