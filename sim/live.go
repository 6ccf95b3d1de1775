package sim

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/local"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// LiveTarget is the Redis a live run talks to: one server or a cluster.
type LiveTarget struct {
	// Addr is a standalone Redis, host:port.
	Addr string
	// Cluster is the seed nodes of a Redis Cluster (instead of Addr).
	Cluster []string
	// Workers is the number of goroutines asking each instance's limiter
	// (default 2 x GOMAXPROCS), at most MaxWorkers, and at most
	// MaxTotalWorkers over all instances.
	Workers int
	// Durable, if above 0, turns on durable sync for the hybrid
	// strategies: each sync call waits for that many replicas, within one
	// sync interval (sync.WithDurableSync), so a run shows what it costs.
	Durable int
	// MaxWait, if above 0, is how long a hybrid decision out of allowance
	// waits for Redis before its failure policy decides (sync.WithMaxWait);
	// 0 keeps the limiter's default.
	MaxWait time.Duration
	// Contenders run after the strategies, each once (see Contender).
	Contenders []Contender
}

// Bounds on a live run's workers. Each instance's client gets a pool of
// Workers x Instances + 8 connections, and go-redis panics on a pool above
// MaxInt32; far below that, the goroutines and their records exhaust the
// machine.
const (
	// MaxWorkers bounds LiveTarget.Workers, the workers per instance.
	MaxWorkers = 4096
	// MaxTotalWorkers bounds Workers x Instances, the workers of a run.
	MaxTotalWorkers = 1 << 16
)

// recChunk is the number of records a live worker keeps in one slice:
// workers fill fixed slices and start new ones, so that no record is
// copied while decisions are being timed, as a growing slice would.
const recChunk = 1 << 15

// latencyEvery is how often a live worker times a decision: every 64th,
// so that reading the clock twice does not slow the rest.
const latencyEvery = 64

// RunLive runs every strategy at every interval against a real Redis, one
// run after the other, each for the scenario's duration: workers ask as
// fast as they can (a closed loop), drawing keys and instances as the
// workload does, while the limiters run their own loops in real time. It
// reports throughput and decision latency besides the accuracy, measured
// against the oracle replaying the arrival times the workers recorded.
// Each run writes under a prefix of its own, and every key has a TTL.
func RunLive(ctx context.Context, cfg Config, target LiveTarget) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if (target.Addr == "") == (len(target.Cluster) == 0) {
		return nil, errors.New("sim: live mode needs one Redis address or a cluster's nodes")
	}
	n := cfg.Scenario.Instances
	if target.Workers <= 0 {
		target.Workers = min(2*runtime.GOMAXPROCS(0), MaxWorkers, MaxTotalWorkers/n)
	}
	if target.Workers > MaxWorkers {
		return nil, fmt.Errorf("sim: live: %d workers per instance, more than %d", target.Workers, MaxWorkers)
	}
	if target.Workers > MaxTotalWorkers/n { // not Workers*n: it can overflow
		return nil, fmt.Errorf("sim: live: %d workers x %d instances, more than %d workers in all", target.Workers, n, MaxTotalWorkers)
	}
	if err := checkContenders(target.Contenders); err != nil {
		return nil, err
	}
	runs := plan(cfg.Strategies, cfg.Intervals)
	for i := range target.Contenders {
		c := &target.Contenders[i]
		runs = append(runs, run{strategy: Strategy(c.Name), contender: c})
	}
	rep := &Report{Scenario: cfg.Scenario.Workload, Mode: "live", Seed: cfg.Scenario.Seed}
	for i, r := range runs {
		start := time.Now()
		res, err := liveRun(ctx, cfg, target, r)
		if err != nil {
			return nil, err
		}
		res.Elapsed = time.Since(start)
		rep.Results = append(rep.Results, res)
		if cfg.Progress != nil {
			cfg.Progress(i+1, len(runs), res)
		}
	}
	return rep, nil
}

// decider makes one live decision for a key on one instance.
type decider func(ctx context.Context, inst int, key string) (bool, error)

// liveRig is one live run's clients and limiters.
type liveRig struct {
	clients   []redis.UniversalClient
	hybrids   []*hlsync.Limiter
	contender ContenderRun
	decide    decider
}

// close stops the limiters and closes the clients. It returns the
// contender's error, which spoils its run: its instances did not stop. A
// hybrid limiter's Close error says only that its final round did not
// finish, after the run's figures are read, so it is not returned.
func (rig *liveRig) close() error {
	var err error
	if rig.contender != nil {
		if e := rig.contender.Close(); e != nil {
			err = fmt.Errorf("sim: closing the contender: %w", e)
		}
	}
	for _, l := range rig.hybrids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.Close(ctx)
		cancel()
	}
	for _, c := range rig.clients {
		_ = c.Close()
	}
	return err
}

// newClient returns a client whose commands hook sees. On a cluster the
// hook goes on each node's client, not the cluster client: durable sync
// sends through the node clients (MasterForKey), which a cluster client's
// hooks do not reach, and every command ends on a node client anyway.
func newClient(t LiveTarget, hook redis.Hook, pool int) redis.UniversalClient {
	if t.Addr != "" {
		c := redis.NewClient(&redis.Options{Addr: t.Addr, PoolSize: pool, Protocol: 2, DisableIdentity: true})
		c.AddHook(hook)
		return c
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.Cluster, PoolSize: pool, Protocol: 2, DisableIdentity: true})
	c.OnNewNode(func(node *redis.Client) { node.AddHook(hook) })
	return c
}

func newLiveRig(ctx context.Context, sc Scenario, t LiveTarget, r run, linger time.Duration, counter *cmdCounter) (*liveRig, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "sim:" + hex.EncodeToString(b[:]) + ":"
	rig := &liveRig{}
	if r.contender != nil { // it has no Redis clients
		cr, err := r.contender.Start(ctx, sc)
		if err != nil {
			return nil, fmt.Errorf("sim: contender %s: %w", r.contender.Name, err)
		}
		rig.contender, rig.decide = cr, cr.Allow
		return rig, nil
	}
	n := sc.Instances
	counter.Pause()
	for range n {
		c := newClient(t, counter.Hook(), t.Workers*n+8)
		rig.clients = append(rig.clients, c)
		// The hybrid limiters never report a Redis failure (their failure
		// policy decides instead), so check that Redis answers first.
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err != nil {
			rig.close()
			return nil, fmt.Errorf("sim: live: %w", err)
		}
	}
	counter.Resume()
	switch r.strategy {
	case Exact:
		ls := make([]*global.Limiter, n)
		for k := range ls {
			l, err := global.New(rig.clients[k], global.TokenBucket, global.WithPrefix(prefix))
			if err != nil {
				rig.close()
				return nil, fmt.Errorf("sim: %w", err)
			}
			ls[k] = l
		}
		rig.decide = func(ctx context.Context, inst int, key string) (bool, error) {
			res, err := ls[inst].Allow(ctx, key, sc.Limit)
			return res.Allowed, err
		}
	case Local:
		shares := make([]hybridlimit.Limit, n)
		some := make([]bool, n)
		ts := make([]*local.Table, n)
		for k := range ts {
			shares[k], some[k] = localShare(sc.Limit, n, k)
			tb, err := local.NewTable()
			if err != nil {
				rig.close()
				return nil, fmt.Errorf("sim: %w", err)
			}
			ts[k] = tb
		}
		rig.decide = func(_ context.Context, inst int, key string) (bool, error) {
			if !some[inst] {
				return false, nil // no share of the burst: see localShare
			}
			res, err := ts[inst].Allow(key, shares[inst])
			return res.Allowed, err
		}
	case Optimistic, Reserve, ReserveSharded:
		for k := range n {
			opts := hybridOptions(r.strategy, prefix, k, n, r.interval, linger)
			if t.Durable > 0 {
				opts = append(opts, hlsync.WithDurableSync(t.Durable, r.interval))
			}
			if t.MaxWait > 0 {
				opts = append(opts, hlsync.WithMaxWait(t.MaxWait))
			}
			l, err := hlsync.New(rig.clients[k], opts...)
			if err != nil {
				rig.close()
				return nil, fmt.Errorf("sim: %w", err)
			}
			rig.hybrids = append(rig.hybrids, l)
		}
		// Presence settled before the first request, as in virtual mode:
		// each loop announces at its first tick and again an interval on,
		// when every instance's record is there to count.
		counter.Pause()
		for _, l := range rig.hybrids {
			if err := l.Start(); err != nil {
				rig.close()
				return nil, fmt.Errorf("sim: %w", err)
			}
		}
		select {
		case <-time.After(r.interval + r.interval/2):
		case <-ctx.Done():
		}
		counter.Resume()
		rig.decide = func(ctx context.Context, inst int, key string) (bool, error) {
			res, err := rig.hybrids[inst].Allow(ctx, key, sc.Limit)
			return res.Allowed, err
		}
	default:
		rig.close()
		return nil, fmt.Errorf("sim: strategy %q cannot run", r.strategy)
	}
	return rig, nil
}

// calls returns the contender's network calls so far; 0 for a strategy,
// whose calls are its Redis commands.
func (rig *liveRig) calls(ctx context.Context) (int64, error) {
	if rig.contender == nil {
		return 0, nil
	}
	n, err := rig.contender.Calls(ctx)
	if err != nil {
		return 0, fmt.Errorf("sim: contender's calls: %w", err)
	}
	return n, nil
}

// liveRec is one live decision as a worker saw it.
type liveRec struct {
	at   int64 // nanoseconds since the run started, when the decision was asked
	key  int32
	inst int16
	ok   bool
}

func liveRun(ctx context.Context, cfg Config, t LiveTarget, r run) (Result, error) {
	sc := cfg.Scenario
	counter := newCmdCounter(cfg.Detail)
	rig, err := newLiveRig(ctx, sc, t, r, cfg.Linger, counter)
	if err != nil {
		return Result{}, err
	}
	keys := make([]string, sc.Keys)
	for i := range keys {
		keys[i] = keyName(i)
	}
	workers := t.Workers * sc.Instances
	chunks := make([][][]liveRec, workers)
	lats := make([][]int64, workers)
	var (
		wg       stdsync.WaitGroup
		firstErr atomic.Pointer[error]
		stop     atomic.Bool
	)
	// Decisions that need no Redis never look at ctx: stop them when it ends.
	defer context.AfterFunc(ctx, func() { stop.Store(true) })()
	cpu0, err := redisCPU(ctx, t)
	if err != nil {
		rig.close()
		return Result{}, err
	}
	masters, slotMaster, err := liveMasters(ctx, t)
	if err != nil {
		rig.close()
		return Result{}, err
	}
	mcpu0, err := mastersCPU(ctx, masters)
	if err != nil {
		rig.close()
		return Result{}, err
	}
	calls0, err := rig.calls(ctx)
	if err != nil {
		rig.close()
		return Result{}, err
	}
	start := time.Now()
	end := int64(sc.Duration)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pick := newPicker(sc, uint64(w))
			recs := make([]liveRec, 0, recChunk)
			defer func() { chunks[w] = append(chunks[w], recs) }()
			var n uint64
			for !stop.Load() {
				t0 := time.Now()
				at := int64(t0.Sub(start))
				if at >= end {
					stop.Store(true)
					return
				}
				key, inst := pick(at)
				ok, err := rig.decide(ctx, inst, keys[key])
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					stop.Store(true)
					return
				}
				if n++; n%latencyEvery == 1 { // the first, then every 64th: a short run still has a sample
					lats[w] = append(lats[w], int64(time.Since(t0)))
				}
				if len(recs) == cap(recs) {
					chunks[w] = append(chunks[w], recs)
					recs = make([]liveRec, 0, recChunk)
				}
				recs = append(recs, liveRec{at: at, key: int32(key), inst: int16(inst), ok: ok})
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	counter.Pause()
	cpu1, cpuErr := redisCPU(ctx, t)
	mcpu1, mcpuErr := mastersCPU(ctx, masters)
	calls1, callsErr := rig.calls(ctx)
	// Read before Close, as the commands and Redis's CPU are: Close hands
	// back every allowance held, a message for each key an instance holds
	// tokens of, which belongs to no decision of the run.
	stats := make([]hlsync.Stats, len(rig.hybrids))
	for i, l := range rig.hybrids {
		stats[i] = l.Stats()
	}
	closeErr := rig.close()
	if err := errors.Join(cpuErr, mcpuErr, callsErr, closeErr); err != nil {
		return Result{}, err
	}
	if e := firstErr.Load(); e != nil {
		return Result{}, fmt.Errorf("sim: live %s: %w", r.strategy, *e)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	recs := make([][]liveRec, workers)
	for w, cs := range chunks {
		recs[w] = slices.Concat(cs...)
	}
	reqs, admitted := mergeRecords(recs)
	oracle, err := runOracle(reqs, sc.Keys, sc.Limit)
	if err != nil {
		return Result{}, err
	}
	res := newResult(r, sc.Instances, measure(reqs, sc.Keys, sc.Limit, sc.Duration, admitted, oracle), counter)
	res.Calls = calls1 - calls0
	nodeOf := func(slot int) int {
		if slotMaster == nil {
			return 0
		}
		return slotMaster[slot]
	}
	res.Nodes = counter.Nodes(len(masters), nodeOf)
	if cfg.Detail {
		res.Diag.keyNodes = keyNodeMessages(counter.KeyCommands(), len(masters), nodeOf)
	}
	for i := range res.Nodes {
		cpu := float64(mcpu1[i] - mcpu0[i])
		res.Nodes[i].RedisCPUNS = &cpu
	}
	rate := float64(len(reqs)) / elapsed.Seconds()
	res.DecisionsPerSec = &rate
	if len(reqs) > 0 {
		cpu := float64(cpu1-cpu0) / float64(len(reqs))
		res.RedisCPUPerDecisionNS = &cpu
	}
	var all []int64
	for _, l := range lats {
		all = append(all, l...)
	}
	if len(all) > 0 {
		slices.Sort(all)
		p50, p99 := quantile(all, 0.50), quantile(all, 0.99)
		res.DecisionP50NS, res.DecisionP99NS = &p50, &p99
	}
	for _, st := range stats {
		res.Diag.add(st)
	}
	return res, nil
}

// quantile returns the q-quantile of sorted xs by nearest rank: the
// ceil(q n)-th smallest.
func quantile(xs []int64, q float64) int64 {
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// newPicker returns a worker's draw of (key, instance) for a request at
// elapsed nanoseconds, following the scenario's workload.
func newPicker(sc Scenario, worker uint64) func(at int64) (int, int) {
	rng := mrand.New(mrand.NewPCG(sc.Seed, 0x11fe_0000+worker))
	inst := func() int { return rng.IntN(sc.Instances) }
	switch sc.Workload {
	case Hotspot:
		z := mrand.NewZipf(rng, sc.ZipfS, 1, uint64(sc.Keys-1))
		return func(int64) (int, int) { return int(z.Uint64()), inst() }
	case SkewedLB:
		z := mrand.NewZipf(rng, sc.ZipfS, 1, uint64(sc.Keys-1))
		return func(int64) (int, int) {
			k := int(z.Uint64())
			return k, skewedInstance(rng, k, sc.Instances, sc.Skew)
		}
	case Flash:
		// Key 0 has 1/K of the draws until half time, then F/K, a step of
		// F as in generate; the others share the rest evenly (a uniform
		// draw over all keys would add to key 0). A closed loop's draws
		// are fixed, so the step comes out of the other keys: each drops
		// from 1/K to (K-F)/(K(K-1)), 75% of before with the defaults,
		// where virtual mode adds key 0's extra to the stream. With F >= K
		// key 0 takes every draw, a step of K, not F.
		half := int64(sc.Duration) / 2
		hot := min(1, sc.Flash/float64(sc.Keys))
		return func(at int64) (int, int) {
			if at < half {
				return rng.IntN(sc.Keys), inst()
			}
			if rng.Float64() < hot {
				return 0, inst()
			}
			return 1 + rng.IntN(sc.Keys-1), inst()
		}
	}
	return func(int64) (int, int) { return rng.IntN(sc.Keys), inst() }
}

// mergeRecords merges the workers' records, each in time order, into one
// stream in time order, with each request's decision.
func mergeRecords(recs [][]liveRec) ([]request, []bool) {
	total := 0
	h := &recHeap{recs: recs}
	for w, r := range recs {
		total += len(r)
		if len(r) > 0 {
			h.c = append(h.c, cursor{w: w})
		}
	}
	heap.Init(h)
	reqs := make([]request, 0, total)
	admitted := make([]bool, 0, total)
	for h.Len() > 0 {
		c := &h.c[0]
		rec := recs[c.w][c.i]
		reqs = append(reqs, request{At: rec.at, Key: rec.key, Inst: int32(rec.inst)})
		admitted = append(admitted, rec.ok)
		if c.i++; c.i == len(recs[c.w]) {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
	}
	return reqs, admitted
}

type cursor struct{ w, i int }

// recHeap orders the workers' cursors by the time of their next record.
type recHeap struct {
	c    []cursor
	recs [][]liveRec
}

func (h *recHeap) Len() int { return len(h.c) }
func (h *recHeap) Less(i, j int) bool {
	a, b := h.recs[h.c[i].w][h.c[i].i], h.recs[h.c[j].w][h.c[j].i]
	if a.at != b.at {
		return a.at < b.at
	}
	return h.c[i].w < h.c[j].w
}
func (h *recHeap) Swap(i, j int) { h.c[i], h.c[j] = h.c[j], h.c[i] }
func (h *recHeap) Push(x any)    { h.c = append(h.c, x.(cursor)) }
func (h *recHeap) Pop() any {
	x := h.c[len(h.c)-1]
	h.c = h.c[:len(h.c)-1]
	return x
}
