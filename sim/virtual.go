package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	stdsync "sync"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/drive"
	"github.com/hybridlimit/hybridlimit/local"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// Epoch is the instant virtual time starts at: fixed, so that the Lua's
// float arithmetic on microsecond timestamps is the same on every run.
var Epoch = time.Date(2100, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is the virtual clock of a run: it reads what the engine last set,
// calls the functions of AfterFunc when Set passes their time, and drives
// the loops of the hybrid limiters made with it (internal/drive), which
// then start no goroutine of their own. It implements the Clock interface
// of package sync. Set and Drive belong to the one goroutine that drives a
// run; Now and AfterFunc are safe for concurrent use.
type Clock struct {
	mu     stdsync.Mutex
	now    time.Time
	timers map[*timer]struct{}
	loops  []drive.Loop
}

type timer struct {
	at time.Time
	f  func()
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t, timers: map[*timer]struct{}{}} }

// Now returns the virtual time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t and calls, each in a goroutine of its own, the
// functions whose time has come.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	var due []func()
	for tm := range c.timers {
		if !tm.at.After(t) {
			due = append(due, tm.f)
			delete(c.timers, tm)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

// AfterFunc calls f once the clock has been Set d past now.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &timer{at: c.now.Add(d), f: f}
	c.timers[tm] = struct{}{}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.timers[tm]
		delete(c.timers, tm)
		return ok
	}
}

// Drive takes the loop of a limiter made with the clock.
func (c *Clock) Drive(l drive.Loop) { c.loops = append(c.loops, l) }

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
	s.scripts, s.standalone = scripts, cfg.Standalone
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
	reqs       []Request
	keys       []string
	oracle     []bool
	rtt        time.Duration
	detail     bool
	scripts    bool // see runVirtual
	standalone bool // Config.Standalone
}

func newSimulation(sc Scenario, rtt time.Duration, detail bool) (*simulation, error) {
	reqs, err := Generate(sc)
	if err != nil {
		return nil, err
	}
	oracle, err := Oracle(reqs, sc.Keys, sc.Limit)
	if err != nil {
		return nil, err
	}
	keys := make([]string, sc.Keys)
	for i := range keys {
		keys[i] = KeyName(i)
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
	counter := NewCounter(s.detail)
	emb.SetTime(Epoch)
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
	res := newResult(r, s.sc.Instances, Measure(s.reqs, s.sc.Keys, s.sc.Limit, admitted, s.oracle), counter)
	diag.Phases = counter.ByPhase()
	if s.detail {
		diag.KeyCommands = counter.KeyCommands()
		diag.KeyMessages = counter.Messages()
	}
	res.Diag = diag
	return res, nil
}

func (s *simulation) at(r Request) time.Time { return Epoch.Add(time.Duration(r.At)) }

// runExact decides every request with one global token-bucket script,
// at the request's time, through the instance's own client.
func (s *simulation) runExact(ctx context.Context, emb *embedded, counter *Counter, admitted []bool) error {
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
// limiters on one virtual Clock, which hands it their loops, and events
// that step them as their loops' goroutines would: a step every tick (a
// quarter interval), and one as soon as a decision asks for a round
// (Woken). A step's round is sent at +RTT/2 (the scripts run in Redis
// then) and finished at +RTT (the replies arrive); decisions keep coming
// in between. Rounds of one instance never overlap: a tick or a wake-up
// during a round steps again as soon as it finishes, as a tick or wake-up
// waiting in its channel does in the loop.
//
// Approximation: a decision that finds no allowance in Reserve mode fetches
// synchronously inside AllowNAt, so that fetch takes no virtual time (zero
// RTT), and the decisions arriving during it are not held back.
type hybrid struct {
	ctx     context.Context
	sim     *simulation
	emb     *embedded
	counter *Counter
	clock   *Clock
	ls      []*hlsync.Limiter
	loops   []drive.Loop
	inst    []instance
	events  events
	seq     uint64
	rtt     int64
}

type instance struct {
	round    drive.Round
	inflight bool
	want     bool
}

func (s *simulation) runHybrid(ctx context.Context, emb *embedded, counter *Counter, r run, admitted []bool) (Diagnostics, error) {
	h := &hybrid{
		ctx:     ctx,
		sim:     s,
		emb:     emb,
		counter: counter,
		clock:   NewClock(Epoch),
		ls:      make([]*hlsync.Limiter, s.sc.Instances),
		inst:    make([]instance, s.sc.Instances),
		rtt:     int64(s.rtt),
	}
	for k := range h.ls {
		c := emb.Client(counter.Hook())
		defer c.Close()
		opts := append(hybridOptions(r.strategy, virtualPrefix, k, s.sc.Instances, r.interval), hlsync.WithClock(h.clock))
		if !s.standalone {
			// One embedded server stands for a cluster: keep calls per slot.
			opts = append(opts, hlsync.WithTuning(hlsync.Tuning{CallPerSlotGroup: true}))
		}
		l, err := hlsync.New(c, opts...)
		if err != nil {
			return Diagnostics{}, fmt.Errorf("sim: %w", err)
		}
		h.ls[k] = l
	}
	h.loops = h.clock.loops
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
	if err := h.loop(admitted); err != nil {
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
// until the last request.
func (h *hybrid) loop(admitted []bool) error {
	reqs := h.sim.reqs
	for i := 0; i < len(reqs); {
		if len(h.events) > 0 && h.events[0].at <= reqs[i].At {
			h.handle(heap.Pop(&h.events).(event))
			continue
		}
		if i%4096 == 0 && h.ctx.Err() != nil {
			return h.ctx.Err()
		}
		r := reqs[i]
		h.setTime(r.At)
		l := h.ls[r.Inst]
		res, err := l.AllowNAt(h.ctx, h.clock.Now(), h.sim.keys[r.Key], h.sim.sc.Limit, 1)
		if err != nil {
			return fmt.Errorf("sim: %s: %w", l.Mode(), err)
		}
		admitted[i] = res.Allowed
		if h.loops[r.Inst].Woken() {
			h.wake(int(r.Inst), r.At)
		}
		i++
	}
	return nil
}

type eventKind uint8

const (
	evTick eventKind = iota
	evSend
	evFinish
)

type event struct {
	at   int64
	seq  uint64
	kind eventKind
	inst int32
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

// setTime moves the virtual clock and miniredis's clock to t.
func (h *hybrid) setTime(t int64) {
	now := Epoch.Add(time.Duration(t))
	h.clock.Set(now)
	h.emb.SetTime(now)
}

func (h *hybrid) handle(ev event) {
	h.setTime(ev.at)
	k := int(ev.inst)
	in := &h.inst[k]
	switch ev.kind {
	case evTick:
		h.push(ev.at+int64(h.loops[k].Tick()), evTick, k)
		h.wake(k, ev.at)
	case evSend:
		// A failed call leaves its keys for the next round, as in the loop.
		h.counter.SetPhase(PhaseRound)
		_ = in.round.Send(h.ctx)
		h.counter.SetPhase(PhaseDecision)
	case evFinish:
		in.round.Finish()
		in.round, in.inflight = nil, false
		if in.want {
			h.step(k, ev.at)
		}
	}
}

// wake asks instance k's loop for a step: now if it is idle, else as soon
// as the round in flight finishes.
func (h *hybrid) wake(k int, t int64) {
	h.inst[k].want = true
	if !h.inst[k].inflight {
		h.step(k, t)
	}
}

// step steps instance k's loop at t. A round with nothing to say makes no
// call and is over at once.
func (h *hybrid) step(k int, t int64) {
	in := &h.inst[k]
	in.want = false
	h.counter.SetPhase(PhasePresence)
	r := h.loops[k].Step(h.ctx)
	h.counter.SetPhase(PhaseDecision)
	if r.Messages() == 0 {
		r.Finish()
		return
	}
	in.round, in.inflight = r, true
	h.push(t+h.rtt/2, evSend, k)
	h.push(t+h.rtt, evFinish, k)
}

// Diagnostics explains a run: the hybrid limiters' counters summed over
// the instances, and where the Redis commands went.
type Diagnostics struct {
	Rounds, RoundErrors, Fetches, Messages, ScriptCalls, Waits uint64
	DeniedRemote, DeniedLocal                                  uint64
	FallbackAllowed, FallbackDenied, Evictions, BreakerOpens   uint64
	// Phases counts the commands sent in each Phase.
	Phases [phases]int64
	// KeyCommands counts, per Redis key and phase, the commands carrying
	// the key (only with Config.Detail).
	KeyCommands map[string][phases]int64
	// KeyMessages counts, per hybrid key's bucket, its sync messages by
	// phase and kind (only with Config.Detail).
	KeyMessages map[string]MsgCounts
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
	_ hlsync.Clock = (*Clock)(nil)
	_ drive.Driver = (*Clock)(nil)
)
