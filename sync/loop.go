package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/drive"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// ErrRunning is what Start and Run return when the loop already runs.
var ErrRunning = errors.New("sync: loop already running")

// Start runs the loop in a goroutine until Close (Run, waited for by Close).
func (l *Limiter) Start() error {
	l.life.Lock()
	defer l.life.Unlock()
	if err := l.claimLoop(); err != nil {
		return err
	}
	go l.loop(context.Background())
	return nil
}

// Run runs the loop until ctx ends or Close, and returns ctx.Err() or nil
// after Close.
func (l *Limiter) Run(ctx context.Context) error {
	l.life.Lock()
	err := l.claimLoop()
	l.life.Unlock()
	if err != nil {
		return err
	}
	return l.loop(ctx)
}

// claimLoop marks the loop as running. The caller holds l.life.
func (l *Limiter) claimLoop() error {
	switch {
	case l.closed.Load():
		return ErrClosed
	case l.running || l.driver != nil:
		return ErrRunning
	}
	l.running = true
	l.looping.Store(true)
	l.stop = make(chan struct{})
	l.done = make(chan struct{})
	return nil
}

// loop steps every tick of the limiter's clock, and when a decision asks
// for a round, until ctx ends or Close; each round is sent and finished
// at once.
func (l *Limiter) loop(ctx context.Context) error {
	defer close(l.done)
	defer l.looping.Store(false)
	defer l.probes.Wait()
	t := newTicker(l.cfg.clock, l.pol.tick())
	defer t.Stop()
	for {
		why := drive.StepWake
		select {
		case <-ctx.Done():
			l.life.Lock()
			l.running = false // a later Start or Run may loop again
			l.life.Unlock()
			return ctx.Err()
		case <-l.stop:
			return nil
		case <-t.c:
			why = drive.StepTick
		case <-l.wake:
		}
		// A round in flight (a fetch's) makes exclusive wait for it without
		// running the step: go again, so that no tick is lost.
		for ran := false; !ran; {
			_ = l.exclusive(func() error {
				ran = true
				r := l.step(ctx)
				err := r.Send(ctx)
				r.Finish()
				return err
			})
		}
		if why == drive.StepTick {
			l.doChores(ctx, l.cfg.clock.Now())
		}
	}
}

// chores holds when the loop's work of once an interval was last done.
type chores struct {
	presence, reshard time.Time
}

// step begins the loop's round at the clock's time: it points the slot
// groups at the masters serving them, probes the nodes whose breakers are
// open, and begins the round of the entries due or flagged, which the
// caller sends and finishes. Steps never overlap.
func (l *Limiter) step(ctx context.Context) *round {
	now := l.cfg.clock.Now()
	l.refreshNodes(ctx, now)
	for _, n := range l.nodes.all() {
		if n.breaker.isOpen() {
			l.probe(n)
		}
	}
	return l.beginRound()
}

// doChores records presence and runs automatic sharding, each once an
// interval: the loop's work at a tick, after the round.
func (l *Limiter) doChores(ctx context.Context, now time.Time) {
	if now.Sub(l.chores.presence) >= l.cfg.interval {
		_ = l.announce(ctx, true)
		l.chores.presence = now
	}
	if now.Sub(l.chores.reshard) >= l.cfg.interval {
		if err := l.reshardHot(ctx); err != nil {
			l.cfg.logger.Debug("sync: reshard", "err", err)
		}
		l.chores.reshard = now
	}
}

// refreshNodes points each slot group at the master serving it now, on a
// cluster client.
func (l *Limiter) refreshNodes(ctx context.Context, now time.Time) {
	if cc, ok := l.rdb.(masterForKey); ok {
		l.nodes.refresh(ctx, cc, l.probeKeys, now)
	}
}

// syncRound runs one reconcile round now, for every entry that is due or
// flagged, without the loop's other work; if a round is already running
// it waits for that one instead. After Close it returns ErrClosed: the
// final round handed everything back, and a round now would lease again
// with nothing to return it.
func (l *Limiter) syncRound(ctx context.Context) error {
	if l.closed.Load() {
		return ErrClosed
	}
	return l.exclusive(func() error {
		r := l.beginRound()
		err := r.Send(ctx)
		r.Finish()
		return err
	})
}

// beginRound prepares a message for every entry due or flagged at the
// clock's time, and evicts idle entries now and then.
func (l *Limiter) beginRound() *round {
	if l.closed.Load() {
		return &round{l: l} // nothing to say after Close (see syncRound)
	}
	now := l.cfg.clock.Now()
	due, gen := l.sweep(now)
	r := l.prepare(now, due, false)
	r.gen = gen
	return r
}

// Messages returns the number of keys the round carries.
func (r *round) Messages() int { return len(r.msgs) }

// Send sends the round's script calls, bounded by the round timeout.
func (r *round) Send(ctx context.Context) error {
	l := r.l
	if len(r.msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.roundTimeout)
	defer cancel()
	start := time.Now()
	err := l.tr.send(ctx, r.msgs)
	r.err = err
	if r.fetch {
		return err // counted in Stats.Fetches when it began
	}
	l.stats.rounds.Add(1)
	l.stats.lastRound.Store(int64(time.Since(start)))
	if err != nil {
		l.stats.roundErrors.Add(1)
	}
	return err
}

// Finish applies the replies at the clock's time, and tells the decisions
// waiting for the round.
func (r *round) Finish() {
	r.apply(r.l.cfg.clock.Now())
	if r.gen > 0 {
		r.l.finished.publish(r.gen, r.err)
	}
}

// driven is a Limiter's loop as a drive.Driver steps it.
type driven struct{ l *Limiter }

func (d driven) Tick() time.Duration { return d.l.pol.tick() }

// Step does a tick's chores before its round (the loop does them after:
// in virtual time they take none). A fetch is the fetcher's round.
func (d driven) Step(ctx context.Context, why drive.Why) drive.Round {
	switch why {
	case drive.StepTick:
		d.l.doChores(ctx, d.l.cfg.clock.Now())
	case drive.StepFetch:
		return d.l.fetchRound()
	}
	return d.l.step(ctx)
}

func (d driven) Linger() time.Duration { return d.l.cfg.linger }

func (d driven) Woken() bool {
	select {
	case <-d.l.wake:
		return true
	default:
		return false
	}
}

func (d driven) Announce(ctx context.Context) error {
	d.l.chores.presence = d.l.cfg.clock.Now()
	return d.l.announce(ctx, true)
}

// sweep returns the entries flagged or due for a sync by the schedule,
// and every quarter of the idle hold evicts the idle entries: the one walk
// over every entry, which is why it is not made every tick.
func (l *Limiter) sweep(now time.Time) ([]*entry, uint64) {
	flagged, gen := l.takeFlagged()
	due := l.sched.take(l.nanos(now), flagged)
	if now.Sub(l.swept) >= l.pol.idleHold()/4 {
		l.swept = now
		l.evictIdle(now)
	}
	return due, gen
}

// evictIdle removes from the tables the entries that hold nothing and have
// not been used for twice the idle hold.
func (l *Limiter) evictIdle(now time.Time) {
	var idle []*entry
	l.each(func(e *entry) {
		l.lockGather(e)
		if l.idle(now, e) {
			idle = append(idle, e)
		}
		l.scatterUnlock(e)
	})
	l.retiring.Lock()
	defer l.retiring.Unlock()
	for _, e := range idle {
		l.lockGather(e)
		gone := l.idle(now, e) && e.evict()
		l.scatterUnlock(e)
		if gone {
			l.tableOf(e).delete(e)
			l.tracked.Add(-1)
			l.stats.evictions.Add(1)
			l.stats.evictedAdmitted.Add(uint64(e.issued)) // nothing held: all issued was admitted
		}
	}
}

// idle reports whether e can be evicted without losing anything: no
// consumption for a few rounds, everything reported, nothing held that
// Redis counts as ours. The caller holds e.mu.
func (l *Limiter) idle(now time.Time, e *entry) bool {
	if e.inflight || e.unacked || e.flagged || e.owes || time.Duration(l.nanos(now)-e.use.usedAt) < 2*l.pol.idleHold() {
		return false
	}
	if !e.synced.Load() {
		// Never asked (a part a decision might have turned to): Redis
		// counts nothing for it, and it was given nothing.
		return e.issued == 0 && e.avail.Load() == 0
	}
	return l.mode.idle(e)
}

// announce records this instance in the presence set (or removes it) and
// reads the live count.
func (l *Limiter) announce(ctx context.Context, alive bool) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.roundTimeout)
	defer cancel()
	life := 3*l.cfg.interval + l.cfg.roundTimeout
	flag := "0"
	if alive {
		flag = "1"
	}
	reply, err := scripts.Presence.Run(ctx, l.rdb, []string{l.presence}, 0, l.cfg.instanceID, life.Microseconds(), flag)
	if err != nil {
		l.stats.countError(err)
		l.presenceFailed(err)
		return fmt.Errorf("sync: presence: %w", err)
	}
	n, ok := reply.(int64)
	if !ok {
		l.stats.errors[ErrorMalformed].Add(1)
		err := fmt.Errorf("sync: presence: %w: %T", scripts.ErrMalformedReply, reply)
		l.presenceFailed(err)
		return err
	}
	if l.presenceDown.Swap(false) {
		l.cfg.logger.Info("sync: presence record written again", "live", n)
	}
	if alive {
		l.live.Store(max(n, 1))
	}
	return nil
}

// presenceFailed logs the first of a run of failed presence calls: the
// live count they would have read stays at its last value meanwhile.
func (l *Limiter) presenceFailed(err error) {
	if !l.presenceDown.Swap(true) {
		l.cfg.logger.Warn("sync: presence record not written; the live instance count stays as last read", "live", l.live.Load(), "err", err)
	}
}

// Close stops the loop, hands back unused allowance and reports what was
// admitted in a final round, and leaves the presence set. A Close that
// failed (ctx ended, Redis unreachable) may be called again; after one
// returned nil, later ones do at once. Decisions after Close return
// ErrClosed once the local allowance is spent.
func (l *Limiter) Close(ctx context.Context) error {
	select {
	case l.closing <- struct{}{}:
		defer func() { <-l.closing }()
	case <-ctx.Done():
		return fmt.Errorf("sync: close: %w", ctx.Err())
	}
	if l.closedClean {
		return nil
	}
	l.life.Lock()
	first := !l.closed.Swap(true)
	running := l.running
	l.life.Unlock()
	if first {
		close(l.closedCh)
	}
	if running {
		if first {
			close(l.stop)
		}
		select {
		case <-l.done:
		case <-ctx.Done():
			return fmt.Errorf("sync: close: %w", ctx.Err())
		}
	}
	// A round in flight makes exclusive wait for it without running ours:
	// go again until the final round itself has run.
	var err error
	for ran := false; !ran; {
		err = l.exclusive(func() error {
			ran = true
			// A reply from a part another instance closed moves its key to
			// the new layout, with what the old entries held: hand that
			// back too, a few moves deep at most.
			for range 4 {
				moves := l.stats.moves.Load()
				var all []*entry
				l.each(func(e *entry) { all = append(all, e) })
				if err := l.roundOf(ctx, all, true); err != nil || l.stats.moves.Load() == moves {
					return err
				}
			}
			return nil
		})
		if ctx.Err() != nil {
			return fmt.Errorf("sync: close: %w", ctx.Err())
		}
	}
	if err != nil {
		return fmt.Errorf("sync: close: final round: %w", err)
	}
	l.probes.Wait()  // a driven loop's
	l.fetches.Wait() // fetchAlone's, cut short by the close
	_ = l.announce(ctx, false)
	l.closedClean = true
	return nil
}
