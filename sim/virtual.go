package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	stdsync "sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// epoch is the instant virtual time starts at: fixed, so that the Lua's
// float arithmetic on microsecond timestamps is the same on every run.
var epoch = time.Date(2100, time.January, 1, 0, 0, 0, 0, time.UTC)

// virtualClock is the virtual clock of a run (internal/clock), which the
// engine sets, and the driver of the loops of the hybrid limiters made
// with it (sync.Driver), which then start no goroutine of their own. It
// implements the Clock interface of package sync. Set and Drive belong to
// the one goroutine that drives a run; Now and AfterFunc are safe for
// concurrent use.
type virtualClock struct {
	*clock.Virtual
	loops []hlsync.Loop
	// await is the engine's hlsync.Driver.Await, set before the first
	// decision.
	await func(l hlsync.Loop, deadline time.Time) error
}

// newVirtualClock returns a virtualClock reading t.
func newVirtualClock(t time.Time) *virtualClock {
	return &virtualClock{Virtual: clock.New(t)}
}

// Drive takes the loop of a limiter made with the clock.
func (c *virtualClock) Drive(l hlsync.Loop) { c.loops = append(c.loops, l) }

// Await blocks a decision until the engine running the clock resumes it
// (hlsync.Driver).
func (c *virtualClock) Await(l hlsync.Loop, deadline time.Time) error {
	if c.await == nil {
		return errors.New("sim: a decision waits for a fetch with no engine to run it")
	}
	return c.await(l, deadline)
}

// virtualPrefix is the key prefix of every virtual run; each run has a
// miniredis of its own, so runs never share a key.
const virtualPrefix = "sim:"

// RunVirtual runs every strategy at every interval on the scenario in
// virtual time and returns the report. It is deterministic: the same
// Config (seed included) gives the same Report. Runs go Parallel at once,
// each with its own embedded Redis and limiters.
func RunVirtual(ctx context.Context, cfg Config) (*Report, error) {
	return runVirtual(ctx, cfg, true)
}

// runVirtual is RunVirtual with scripts run by the embedded Redis's own
// interpreter (scripts) or by miniredis's EVAL, which tests compare.
func runVirtual(ctx context.Context, cfg Config, scripts bool) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s, err := newSimulation(cfg.Scenario, cfg.RTT, cfg.Detail)
	if err != nil {
		return nil, err
	}
	s.scripts, s.standalone, s.linger = scripts, cfg.Standalone, cfg.Linger
	runs := plan(cfg.Strategies, cfg.Intervals)
	results := make([]Result, len(runs))
	errs := make([]error, len(runs))
	par := cfg.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   stdsync.WaitGroup
		mu   stdsync.Mutex
		done int
		next = make(chan int)
	)
	for range min(par, len(runs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				start := time.Now()
				res, err := s.virtualRun(ctx, runs[i])
				res.Elapsed = time.Since(start)
				results[i], errs[i] = res, err
				if err != nil {
					cancel()
					continue
				}
				mu.Lock()
				done++
				if cfg.Progress != nil {
					cfg.Progress(done, len(runs), res)
				}
				mu.Unlock()
			}
		}()
	}
	for _, i := range startOrder(runs) {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &Report{Scenario: cfg.Scenario.Workload, Mode: "virtual", Seed: cfg.Scenario.Seed, Results: results}, nil
}

// simulation is what every run of one report shares: the scenario, its
// arrival stream and the oracle's decisions on it.
type simulation struct {
	sc         Scenario
	reqs       []request
	keys       []string
	oracle     []bool
	rtt        time.Duration
	detail     bool
	scripts    bool // see runVirtual
	standalone bool // Config.Standalone
	linger     time.Duration
}

func newSimulation(sc Scenario, rtt time.Duration, detail bool) (*simulation, error) {
	reqs, err := generate(sc)
	if err != nil {
		return nil, err
	}
	oracle, err := runOracle(reqs, sc.Keys, sc.Limit)
	if err != nil {
		return nil, err
	}
	keys := make([]string, sc.Keys)
	for i := range keys {
		keys[i] = keyName(i)
	}
	return &simulation{sc: sc, reqs: reqs, keys: keys, oracle: oracle, rtt: rtt, detail: detail}, nil
}

// virtualRun runs one strategy at one interval over the stream in virtual
// time and measures it.
func (s *simulation) virtualRun(ctx context.Context, r run) (Result, error) {
	emb, err := newEmbeddedLua(s.scripts)
	if err != nil {
		return Result{}, err
	}
	defer emb.Close()
	counter := newCmdCounter(s.detail)
	emb.SetTime(epoch)
	admitted := make([]bool, len(s.reqs))
	var diag Diagnostics
	switch r.strategy {
	case Exact:
		err = s.runExact(ctx, emb, counter, admitted)
	case Local:
		err = s.runLocal(admitted)
	case Optimistic, Reserve, ReserveSharded:
		diag, err = s.runHybrid(ctx, emb, counter, r, admitted)
	default:
		err = fmt.Errorf("sim: strategy %q cannot run", r.strategy)
	}
	if err != nil {
		return Result{}, err
	}
	res := newResult(r, s.sc.Instances, measure(s.reqs, s.sc.Keys, s.sc.Limit, s.sc.Duration, admitted, s.oracle), counter)
	nodes := ModelMasters
	if s.standalone {
		nodes = 1
	}
	res.Nodes = counter.Nodes(nodes, func(slot int) int { return modelMaster(slot, nodes) })
	diag.byPhase = counter.ByPhase()
	if r.strategy.Synced() {
		res.FetchCmds = diag.byPhase[phaseDecision]
	}
	if s.detail {
		diag.keyCommands = counter.KeyCommands()
		diag.keyMessages = counter.Messages()
		diag.keyNodes = keyNodeMessages(diag.keyCommands, nodes, func(slot int) int { return modelMaster(slot, nodes) })
	}
	res.Diag = diag
	if s.detail {
		res.Diag.classes = breakdown(res, s.sc.Limit, s.sc.Duration)
	}
	return res, nil
}

func (s *simulation) at(r request) time.Time { return epoch.Add(time.Duration(r.At)) }

// runExact decides every request with one global token-bucket script,
// at the request's time, through the instance's own client.
func (s *simulation) runExact(ctx context.Context, emb *embedded, counter *cmdCounter, admitted []bool) error {
	ls := make([]*global.Limiter, s.sc.Instances)
	for k := range ls {
		c := emb.Client(counter.Hook())
		defer c.Close()
		l, err := global.New(c, global.TokenBucket, global.WithPrefix(virtualPrefix))
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		ls[k] = l
	}
	for i, r := range s.reqs {
		if i%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		t := s.at(r)
		emb.SetTime(t)
		res, err := ls[r.Inst].AllowAt(ctx, t, s.keys[r.Key], s.sc.Limit, 1)
		if err != nil {
			return fmt.Errorf("sim: exact: %w", err)
		}
		admitted[i] = res.Allowed
	}
	return nil
}

// runLocal decides every request with the instance's own bucket for the
// key, holding the instance's share of the limit (an instance without a
// share denies all). It uses local.Core, the core of every local bucket,
// on the virtual time axis directly.
func (s *simulation) runLocal(admitted []bool) error {
	shares := make([]hybridlimit.Limit, s.sc.Instances)
	some := make([]bool, s.sc.Instances)
	for k := range shares {
		shares[k], some[k] = localShare(s.sc.Limit, s.sc.Instances, k)
	}
	cores := map[int64]*local.Core{}
	for i, r := range s.reqs {
		if !some[r.Inst] {
			continue // admitted[i] stays false
		}
		share := shares[r.Inst]
		id := int64(r.Inst)*int64(s.sc.Keys) + int64(r.Key)
		c := cores[id]
		if c == nil {
			core, err := local.NewCore(share, r.At)
			if err != nil {
				return fmt.Errorf("sim: local: %w", err)
			}
			c = &core
			cores[id] = c
		}
		res, err := c.Take(r.At, 1)
		if err != nil {
			return fmt.Errorf("sim: local: %w", err)
		}
		admitted[i] = res.Allowed
	}
	return nil
}

// hybrid is the virtual-time driver of the hybrid strategies: N real
// limiters on one virtualClock, which hands it their loops, and events
// that step them as their loops' goroutines and fetchers would: a step
// every tick (a quarter interval), one as soon as a decision asks for a
// round (Woken), and a fetch round once the linger has passed since a
// decision began to wait for one (Await). A round is sent at +RTT/2 (the
// scripts run in Redis then) and finished at +RTT (the replies arrive);
// decisions keep coming in between. Rounds of one instance never overlap:
// a step or fetch due during a round runs as soon as it finishes, the
// tick's first, as production's exclusive rounds do.
//
// Each decision runs in a goroutine of the engine's (a worker), one at a
// time: the engine hands it the request and waits until it decides or
// waits for a fetch; a waiting decision is resumed, alone again, when the
// round that carries its key finishes or its deadline passes. So the run
// stays deterministic while decisions wait, as they do in production.
type hybrid struct {
	ctx      context.Context
	sim      *simulation
	emb      *embedded
	counter  *cmdCounter
	clock    *virtualClock
	ls       []*hlsync.Limiter
	loops    []hlsync.Loop
	instOf   map[hlsync.Loop]int
	inst     []instance
	events   events
	seq      uint64
	rtt      int64
	now      int64 // virtual time, ns since epoch
	admitted []bool

	status   chan status // from the worker running
	idle     []*worker
	workers  []*worker
	current  *worker // the worker running
	deciding int     // the request it decides
	waits    int     // decisions waiting
	failed   error   // of decisions resumed by events
}

type instance struct {
	round    hlsync.Round
	inflight bool
	want     bool       // a step as soon as the round in flight finishes
	wantWhy  hlsync.Why // what that step is for
	err      error      // the error of the round in flight's calls
	phase    phase      // the round in flight's: phaseDecision if decisions wait for it
	fetchDue bool       // a linger runs: a step at fetchAt
	fetchAt  int64
	waiting  []*waiter // decisions waiting for the next round
	riding   []*waiter // those the round in flight carries
}

// worker is a goroutine that runs decisions (work).
type worker struct {
	next   chan batch
	waited bool // the decision it runs waited
}

// status is what the worker running tells the engine when it stops: it
// decided request i (res, err; woke: the decision woke its loop), or its
// batch ends (i < 0), or a decision waits (wait); next is the request
// after.
type status struct {
	w    *worker
	i    int
	res  hybridlimit.Result
	err  error
	woke bool
	wait *waiter
	next int
}

// waiter is a decision waiting for a round (hlsync.Driver.Await).
type waiter struct {
	w        *worker
	inst     int
	deadline int64
	resume   chan error
	done     bool // resumed
}

func (s *simulation) runHybrid(ctx context.Context, emb *embedded, counter *cmdCounter, r run, admitted []bool) (Diagnostics, error) {
	h := &hybrid{
		ctx:      ctx,
		sim:      s,
		emb:      emb,
		counter:  counter,
		clock:    newVirtualClock(epoch),
		ls:       make([]*hlsync.Limiter, s.sc.Instances),
		inst:     make([]instance, s.sc.Instances),
		rtt:      int64(s.rtt),
		admitted: admitted,
		status:   make(chan status),
		instOf:   map[hlsync.Loop]int{},
	}
	h.clock.await = h.await
	defer h.stopWorkers()
	for k := range h.ls {
		var c interface {
			hybridlimit.Redis
			Close() error
		} = emb.Client(counter.Hook())
		if !s.standalone {
			c = newModelCluster(c.(*redis.Client), ModelMasters)
		}
		defer c.Close()
		opts := append(hybridOptions(r.strategy, virtualPrefix, k, s.sc.Instances, r.interval, s.linger), hlsync.WithClock(h.clock))
		l, err := hlsync.New(c, opts...)
		if err != nil {
			return Diagnostics{}, fmt.Errorf("sim: %w", err)
		}
		h.ls[k] = l
	}
	h.loops = h.clock.loops
	for k, lp := range h.loops {
		h.instOf[lp] = k
	}
	// The instances have been running a while: presence is settled before
	// the first request (two passes, so each sees all), and each loop ticks
	// at its own phase.
	counter.Pause()
	for range 2 {
		for _, lp := range h.loops {
			if err := lp.Announce(ctx); err != nil {
				return Diagnostics{}, fmt.Errorf("sim: %w", err)
			}
		}
	}
	counter.Resume()
	phases := rand.New(rand.NewPCG(s.sc.Seed, uint64(r.interval)))
	for k, lp := range h.loops {
		h.push(phases.Int64N(int64(lp.Tick())), evTick, k)
	}
	if err := h.loop(); err != nil {
		return Diagnostics{}, err
	}
	counter.Pause()
	var diag Diagnostics
	h.setTime(int64(s.sc.Duration))
	for _, l := range h.ls {
		diag.add(l.Stats())
		_ = l.Close(context.Background()) // hands back allowance; not counted
	}
	return diag, nil
}

// loop processes requests and events in time order, events first on a tie,
// until the last request is decided. Requests go to a worker in batches:
// those before the next event, which the worker decides in order until
// one waits or wakes its loop.
func (h *hybrid) loop() error {
	reqs := h.sim.reqs
	for i := 0; i < len(reqs) || h.waits > 0; {
		if h.ctx.Err() != nil {
			return h.ctx.Err()
		}
		if len(h.events) > 0 && (i == len(reqs) || h.events[0].at <= reqs[i].At) {
			if err := h.handle(heap.Pop(&h.events).(event)); err != nil {
				return err
			}
			continue
		}
		until := int64(math.MaxInt64)
		if len(h.events) > 0 {
			until = h.events[0].at
		}
		w := h.worker()
		w.next <- batch{from: i, until: until}
		next, err := h.settle()
		if err != nil {
			return err
		}
		i = next
	}
	return nil
}

// batch is a worker's job: the requests from the one at from until the
// first at or after until (virtual time).
type batch struct {
	from  int
	until int64
}

// worker returns an idle worker, starting one if none is.
func (h *hybrid) worker() *worker {
	if n := len(h.idle); n > 0 {
		w := h.idle[n-1]
		h.idle = h.idle[:n-1]
		return w
	}
	w := &worker{next: make(chan batch)}
	h.workers = append(h.workers, w)
	go h.work(w)
	return w
}

// work decides the batches given to w. While a worker decides, the engine
// waits for it, so it moves the virtual time and records admissions
// itself. A decision that waits (await) hands the rest of its batch back
// to the engine; once resumed and decided, its worker reports it alone.
func (h *hybrid) work(w *worker) {
	reqs := h.sim.reqs
	for b := range w.next {
		i := b.from
		for ; i < len(reqs) && reqs[i].At < b.until; i++ {
			r := reqs[i]
			h.setTime(r.At)
			h.current, h.deciding, w.waited = w, i, false
			res, err := h.ls[r.Inst].AllowNAt(h.ctx, h.clock.Now(), h.sim.keys[r.Key], h.sim.sc.Limit, 1)
			if w.waited || err != nil {
				h.status <- status{w: w, i: i, res: res, err: err, next: i + 1}
				break
			}
			h.admitted[i] = res.Allowed
			if h.loops[r.Inst].Woken() {
				h.status <- status{w: w, i: i, res: res, woke: true, next: i + 1}
				break
			}
		}
		if i == len(reqs) || reqs[i].At >= b.until {
			h.status <- status{w: w, i: -1, next: i}
		}
	}
}

// stopWorkers ends the workers, every decision having been resumed.
func (h *hybrid) stopWorkers() {
	for _, in := range h.inst {
		for _, wt := range append(in.waiting, in.riding...) {
			if !wt.done {
				h.resume(wt, context.Canceled)
			}
		}
	}
	for _, w := range h.workers {
		close(w.next)
	}
}

// settle waits until the worker running stops, and records why: its batch
// is done, or a decision woke its loop, waits, or decided after waiting.
// It returns the request to go on from, for a batch.
func (h *hybrid) settle() (next int, err error) {
	st := <-h.status
	if st.wait != nil {
		h.park(st.wait)
		return st.next, nil
	}
	h.idle = append(h.idle, st.w)
	if st.i < 0 {
		return st.next, nil
	}
	r := h.sim.reqs[st.i]
	if st.err != nil {
		return 0, fmt.Errorf("sim: %s: %w", h.ls[r.Inst].Mode(), st.err)
	}
	h.admitted[st.i] = st.res.Allowed
	if st.woke || h.loops[r.Inst].Woken() {
		h.push(h.now, evWake, int(r.Inst))
	}
	return st.next, nil
}

// await is virtualClock.Await: it runs in the worker of the decision that
// waits, which hands control back to the engine until resumed.
func (h *hybrid) await(l hlsync.Loop, deadline time.Time) error {
	h.current.waited = true
	wt := &waiter{w: h.current, inst: h.instOf[l], deadline: int64(deadline.Sub(epoch)), resume: make(chan error)}
	h.status <- status{wait: wt, next: h.deciding + 1}
	return <-wt.resume
}

// park records a waiting decision, and starts its instance's linger if
// none runs.
func (h *hybrid) park(wt *waiter) {
	h.waits++
	in := &h.inst[wt.inst]
	in.waiting = append(in.waiting, wt)
	h.pushWaiter(wt)
	h.lingerFor(wt.inst)
}

// lingerFor schedules the step that serves instance k's waiting
// decisions, after the loop's linger, unless one is due or a round is in
// flight (its finish does it).
func (h *hybrid) lingerFor(k int) {
	in := &h.inst[k]
	if len(in.waiting) == 0 || in.fetchDue || in.inflight {
		return
	}
	in.fetchDue, in.fetchAt = true, h.now+int64(h.loops[k].Linger())
	h.push(in.fetchAt, evFetch, k)
}

// resume lets waiting decision wt go on with err, and waits until it
// decides or waits again.
func (h *hybrid) resume(wt *waiter, err error) {
	wt.done = true
	h.waits--
	h.current = wt.w
	wt.resume <- err
	if _, settleErr := h.settle(); settleErr != nil && h.ctx.Err() == nil {
		h.failed = errors.Join(h.failed, settleErr)
	}
}

type eventKind uint8

const (
	evTick   eventKind = iota
	evWake             // a decision asked for a round (Woken)
	evFetch            // a linger ends (fetchAt)
	evExpire           // a waiting decision's deadline
	evSend
	evFinish
)

type event struct {
	at   int64
	seq  uint64
	kind eventKind
	inst int32
	wt   *waiter // evExpire's
}

// events is a min-heap of events by time, then by scheduling order.
type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

func (h *hybrid) push(at int64, kind eventKind, k int) {
	h.seq++
	heap.Push(&h.events, event{at: at, seq: h.seq, kind: kind, inst: int32(k)})
}

// pushWaiter schedules wt's deadline.
func (h *hybrid) pushWaiter(wt *waiter) {
	h.seq++
	heap.Push(&h.events, event{at: max(wt.deadline, h.now), seq: h.seq, kind: evExpire, inst: int32(wt.inst), wt: wt})
}

// setTime moves the virtual clock and miniredis's clock to t.
func (h *hybrid) setTime(t int64) {
	h.now = t
	now := epoch.Add(time.Duration(t))
	h.clock.Set(now)
	h.emb.SetTime(now)
}

func (h *hybrid) handle(ev event) error {
	h.setTime(ev.at)
	k := int(ev.inst)
	in := &h.inst[k]
	switch ev.kind {
	case evTick:
		h.push(ev.at+int64(h.loops[k].Tick()), evTick, k)
		in.fetchDue = false // a linger ends at a tick
		h.wake(k, hlsync.StepTick)
	case evWake:
		h.wake(k, hlsync.StepWake)
	case evFetch:
		if in.fetchDue && ev.at == in.fetchAt {
			in.fetchDue = false
			h.wake(k, hlsync.StepFetch)
		}
	case evExpire:
		if !ev.wt.done {
			in.waiting = slices.DeleteFunc(in.waiting, func(w *waiter) bool { return w == ev.wt })
			h.resume(ev.wt, hlsync.ErrExpired)
		}
	case evSend:
		// A failed call leaves its keys for the next round, as in the loop.
		h.counter.SetPhase(in.phase)
		in.err = in.round.Send(h.ctx)
		h.counter.SetPhase(phaseDecision)
	case evFinish:
		in.round.Finish()
		in.round, in.inflight = nil, false
		riders := in.riding
		in.riding = nil
		for _, wt := range riders {
			if !wt.done {
				h.resume(wt, in.err)
			}
		}
		if in.want {
			h.step(k, in.wantWhy)
		}
		h.lingerFor(k)
	}
	err := h.failed
	h.failed = nil
	return err
}

// wake asks instance k's loop for a step, for why: now if it is idle, else
// as soon as the round in flight finishes (a tick's first: it has more to
// do); a linger running then ends.
func (h *hybrid) wake(k int, why hlsync.Why) {
	in := &h.inst[k]
	if !in.want || why < in.wantWhy {
		in.wantWhy = why
	}
	in.want = true
	if !in.inflight {
		h.step(k, in.wantWhy)
	}
}

// step steps instance k's loop now. Its round carries the keys of the
// decisions waiting; a round with nothing to say makes no call, and is
// over at once.
func (h *hybrid) step(k int, why hlsync.Why) {
	in := &h.inst[k]
	in.want, in.fetchDue = false, false
	h.counter.SetPhase(phasePresence)
	r := h.loops[k].Step(h.ctx, why)
	h.counter.SetPhase(phaseDecision)
	riders := in.waiting
	in.waiting = nil
	if r.Messages() == 0 {
		r.Finish()
		for _, wt := range riders {
			if !wt.done {
				h.resume(wt, nil)
			}
		}
		h.lingerFor(k)
		return
	}
	in.round, in.inflight, in.riding, in.err, in.phase = r, true, riders, nil, phaseRound
	if len(riders) > 0 {
		in.phase = phaseDecision
	}
	h.push(h.now+h.rtt/2, evSend, k)
	h.push(h.now+h.rtt, evFinish, k)
}

// Diagnostics explains a run: the hybrid limiters' counters (sync.Stats)
// summed over the instances, and where the Redis commands went, which
// Report.WriteDiag prints.
type Diagnostics struct {
	Rounds, RoundErrors, Fetches, Messages, ScriptCalls, Waits uint64
	DeniedRemote, DeniedLocal                                  uint64
	FallbackAllowed, FallbackDenied, Evictions, BreakerOpens   uint64

	// byPhase counts the commands sent in each phase.
	byPhase [phases]int64
	// keyCommands counts, per Redis key and phase, the commands carrying
	// the key (only with Config.Detail).
	keyCommands map[string][phases]int64
	// keyMessages counts, per hybrid key's bucket, its sync messages by
	// phase and kind (only with Config.Detail).
	keyMessages map[string]msgCounts
	// classes sums the above by class of key demand (only with
	// Config.Detail).
	classes []classRow
	// keyNodes counts, per key (all its parts together), the commands
	// that carried it to each node (only with Config.Detail).
	keyNodes map[int][]int64
}

// hottest returns the key the nodes ran the most messages of (the
// smallest of equals), and those messages on each node; nil if no key
// was counted.
func (d *Diagnostics) hottest() (int, []int64) {
	hot, most := -1, int64(-1)
	for k, nodes := range d.keyNodes {
		var sum int64
		for _, c := range nodes {
			sum += c
		}
		if sum > most || sum == most && k < hot {
			hot, most = k, sum
		}
	}
	return hot, d.keyNodes[hot]
}

// keyNodeMessages returns, for each key, how many of the commands counted
// by keyCommands (all phases) carried it, or one of its parts, to each of
// n nodes.
func keyNodeMessages(keyCommands map[string][phases]int64, n int, nodeOf func(slot int) int) map[int][]int64 {
	byKey := map[int][]int64{}
	for name, v := range keyCommands {
		k, ok := callerKey(name)
		if !ok {
			continue
		}
		if byKey[k] == nil {
			byKey[k] = make([]int64, n)
		}
		for _, c := range v {
			byKey[k][nodeOf(hybridlimit.Slot(name))] += c
		}
	}
	return byKey
}

func (d *Diagnostics) add(s hlsync.Stats) {
	d.Rounds += s.Rounds
	d.RoundErrors += s.RoundErrors
	d.BreakerOpens += s.BreakerOpens
	d.Fetches += s.Fetches
	d.Messages += s.Messages
	d.ScriptCalls += s.ScriptCalls
	d.Waits += s.Waits
	d.DeniedRemote += s.DeniedRemote
	d.DeniedLocal += s.DeniedLocal
	d.FallbackAllowed += s.FallbackAllowed
	d.FallbackDenied += s.FallbackDenied
	d.Evictions += s.Evictions
}

var (
	_ hlsync.Clock  = (*virtualClock)(nil)
	_ hlsync.Driver = (*virtualClock)(nil)
)
