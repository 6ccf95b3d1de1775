package sync

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

var errCutOff = errors.New("test: cut off from Redis")

// cutHook cuts a client off: mode 1 lets the next pipeline run in Redis
// and drops its replies (a reply lost after the script ran), then cuts
// every later command off (mode 2) until mode 0 is stored again.
type cutHook struct{ mode atomic.Int32 }

func (h *cutHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cutHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.mode.Load() != 0 {
			cmd.SetErr(errCutOff)
			return errCutOff
		}
		return next(ctx, cmd)
	}
}

func (h *cutHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch h.mode.Load() {
		case 1:
			_ = next(ctx, cmds) // runs in Redis...
			for _, c := range cmds {
				c.SetErr(errCutOff) // ...but no reply comes back
			}
			h.mode.Store(2)
			return errCutOff
		case 2:
			for _, c := range cmds {
				c.SetErr(errCutOff)
			}
			return errCutOff
		}
		return next(ctx, cmds)
	}
}

// partsLeftIn returns the whole tokens left in each part of key in
// layout at, asked through the sync script with messages granting nothing.
func partsLeftIn(t *testing.T, c hybridlimit.Redis, l *Limiter, key string, limit hybridlimit.Limit, at layout) []int64 {
	t.Helper()
	left := make([]int64, at.shards)
	for j := range at.shards {
		p := partOf(limit, j, at.shards)
		bucket, allow := l.partKeys(key, j, at)
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

// TestRejoinKeepsLostGrant: an instance on a split key's current layout is
// cut off just after Redis ran its top-up (the reply is lost, the entry
// unacked). Its next message must restate the same totals, so that the
// reply's total gives it the grant (design 6.2, section 7: reply lost, no
// token lost). The rule that sends a key out of touch for half a marker's
// life back to the configured layout first retired the unacked entry
// without hearing from Redis again: the grant stayed in the abandoned
// ledger (506 of 3,000 tokens). Admitted plus what the parts hold after
// Close must be the budget.
func TestRejoinKeepsLostGrant(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	clk := clock.New(time.Now())
	cut := &cutHook{}
	cb := srv.Client(t)
	cb.AddHook(cut)
	rdb := srv.Client(t)
	a := handDriven(t, rdb, clk, prefix, "a", WithFailurePolicy(hybridlimit.FailClosed))
	b := handDriven(t, cb, clk, prefix, "b", WithFailurePolicy(hybridlimit.FailClosed))
	const budget = 3000
	limit := hybridlimit.Limit{Rate: budget, Period: hybridlimit.MaxRefill, Burst: budget} // frozen
	var admitted int64
	spend := func(l *Limiter, cost int64) bool {
		t.Helper()
		r, err := l.AllowN(ctx, "hot", limit, cost)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed && r.Source != hybridlimit.SourceFallback {
			admitted += cost
		}
		return r.Allowed
	}
	split := layout{3, 1}
	if err := a.reshard(ctx, "hot", limit, layout{1, 0}, split); err != nil {
		t.Fatal(err)
	}
	spend(b, 1)
	home := b.table.get("hot")
	if home.layout() != split {
		t.Fatalf("b on %v, want %v", home.layout(), split)
	}
	bucket := b.bucketOf("hot", int(home.shard), split)
	cut.mode.Store(1) // the top-up for this decision runs; its reply is lost
	if spend(b, 500) {
		t.Fatal("admitted without a reply")
	}
	ledger, _ := scripts.ParseSyncLedger(rdb.HGet(ctx, bucket, scripts.SyncLedgerField("b")).Val())
	b.lockGather(home)
	issued, unacked := home.ledger.Issued, home.ledger.Unacked
	b.scatterUnlock(home)
	t.Logf("b's ledger in Redis %+v; b's entry issued %d, unacked %v", ledger, issued, unacked)

	// Cut off for half a marker's life: the entry must go back to the
	// configured layout, but not before Redis has answered for the grant.
	clk.Advance(b.markerLife(limit)/2 + time.Second)
	_ = b.Sync(ctx)
	moves := b.Stats().Moves
	cut.mode.Store(0) // reachable again
	for range 10 {
		clk.Advance(100 * time.Millisecond)
		if err := b.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if at := b.table.get("hot").layout(); at != split || b.Stats().Moves < moves+2 {
		t.Fatalf("b on %v after %d moves, want %v by way of the configured layout", at, b.Stats().Moves-moves, split)
	}
	for _, l := range []*Limiter{a, b} {
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	left := partsLeftIn(t, rdb, a, "hot", limit, split)
	sum := left[0] + left[1] + left[2]
	t.Logf("admitted %d, left in the parts %v, of %d", admitted, left, budget)
	if admitted+sum != budget {
		t.Errorf("admitted %d + left %d = %d, want the budget %d: %d tokens lost", admitted, sum, admitted+sum, budget, budget-admitted-sum)
	}
}

// TestHealthySplitKeyNotMovedBack: a split key whose home part hears from
// Redis every round is not "cut off". But a part entry that fallOver
// created (decide.go fallOver -> l.part) and never needed to ask has
// heardAt = its creation time, is never evicted (idle needs synced), and
// is never refreshed; the first time a decision turns to it after half a
// marker's life, prepare puts its key on the rejoin list and moveBack
// moves the whole, healthy key back to the configured layout and on
// again: two moves for nothing, and the waiting decision is not served.
func TestHealthySplitKeyNotMovedBack(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	clk := clock.New(time.Now())
	a := handDriven(t, rdb, clk, prefix, "a")
	limit := hybridlimit.Limit{Rate: 3000, Period: time.Hour, Burst: 3000}
	split := layout{3, 1}
	if err := a.reshard(ctx, "hot", limit, layout{1, 0}, split); err != nil {
		t.Fatal(err)
	}
	if r, err := a.AllowN(ctx, "hot", limit, 1); err != nil || !r.Allowed {
		t.Fatalf("%+v %v", r, err)
	}
	home := a.table.get("hot")
	if home.layout() != split {
		t.Fatalf("a on %v, want %v", home.layout(), split)
	}
	// As fallOver does when home runs dry: it makes an entry for every
	// other part and asks only one; this is one it did not ask.
	j := (int(home.shard) + 1) % 3
	p, err := a.part("hot", limit, j, split)
	if err != nil {
		t.Fatal(err)
	}
	// An hour of healthy use: a token every 5s, home topping up its lease.
	steps := int(a.markerLife(limit)/2/(5*time.Second)) + 2
	for i := range steps {
		clk.Advance(5 * time.Second)
		if r, err := a.AllowN(ctx, "hot", limit, 1); err != nil || !r.Allowed {
			t.Fatalf("step %d: %+v %v", i, r, err)
		}
		if err := a.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if e := a.table.get("hot"); e == nil {
			t.Fatalf("step %d: home gone, %+v", i, a.Stats())
		}
	}
	h := a.table.get("hot")
	if h == nil {
		t.Fatal("home evicted")
	}
	if since := time.Duration(a.nanos(clk.Now()) - h.heardAt.Load()); h.layout() != split || since > time.Minute {
		t.Fatalf("home on %v heard %v ago: not a healthy split key", h.layout(), since)
	}
	moves := a.Stats().Moves
	a.flag(p, 1, true) // home ran dry; a decision turns to part j
	clk.Advance(100 * time.Millisecond)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if at := a.table.get("hot").layout(); at != split || a.Stats().Moves != moves {
		t.Errorf("home heard from Redis %v ago, yet the key went to %v with %d moves: moved back for a part entry never asked",
			time.Duration(a.nanos(clk.Now())-h.heardAt.Load()), at, a.Stats().Moves-moves)
	}
}

// TestUnaskedPartEvicted leaves a part entry that a decision made but
// never asked Redis about, as fallOver makes one for every part and asks
// one: idle eviction required an entry Redis had answered, so such parts
// stayed in memory for good, counted against the key bound.
func TestUnaskedPartEvicted(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	ctx := context.Background()
	clk := clock.New(time.Now())
	a := handDriven(t, rdb, clk, redistest.Prefix(t), "a")
	limit := hybridlimit.Limit{Rate: 3000, Period: time.Hour, Burst: 3000}
	split := layout{3, 1}
	if err := a.reshard(ctx, "hot", limit, layout{1, 0}, split); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AllowN(ctx, "hot", limit, 1); err != nil {
		t.Fatal(err)
	}
	j := (int(a.table.get("hot").shard) + 1) % 3
	if _, err := a.part("hot", limit, j, split); err != nil {
		t.Fatal(err)
	}
	name := partName("hot", j, split)
	for range 4 {
		clk.Advance(a.pol.IdleHold())
		if err := a.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if e := a.parts.get(name); e != nil {
		t.Errorf("part %s, never asked and unused for 4 idle holds, still tracked (%d keys)", name, a.Stats().Keys)
	}
}
