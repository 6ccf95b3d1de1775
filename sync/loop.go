package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit"
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
	t := newTicker(l.cfg.clock, l.pol.Tick())
	defer t.Stop()
	for {
		why := StepWake
		select {
		case <-ctx.Done():
			l.life.Lock()
			l.running = false // a later Start or Run may loop again
			l.life.Unlock()
			return ctx.Err()
		case <-l.stop:
			return nil
		case <-t.c:
			why = StepTick
		case <-l.wake:
		}
		// A round of its own, so that no tick is lost to a fetch's.
		_ = l.ownRound(ctx, func() error {
			r := l.step(ctx)
			err := r.Send(ctx)
			r.Finish()
			return err
		})
		if why == StepTick {
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
// interval: the loop's work at a tick, after the round. Presence is due
// half a tick early, so that a tick that comes a little early does not put
// it off a whole tick: the reset log it reads is read at least once an
// interval.
func (l *Limiter) doChores(ctx context.Context, now time.Time) {
	if now.Sub(l.chores.presence) >= l.cfg.interval-l.pol.Tick()/2 {
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

// syncRound runs one reconcile round of its own now (ownRound), for every
// entry that is due or flagged, without the loop's other work. After
// Close it returns ErrClosed: the final round handed everything back, and
// a round now would lease again with nothing to return it.
func (l *Limiter) syncRound(ctx context.Context) error {
	if l.closed.Load() {
		return ErrClosed
	}
	return l.ownRound(ctx, func() error {
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
	due, serial := l.sweep(now)
	r := l.prepare(now, due, false)
	r.serial = serial
	l.carryRiders(r)
	return r
}

// sweep returns the entries flagged or due for a sync by the schedule,
// and every quarter of the idle hold evicts the idle entries: the one walk
// over every entry, which is why it is not made every tick.
func (l *Limiter) sweep(now time.Time) ([]*entry, uint64) {
	flagged, serial := l.takeFlagged()
	due := l.sched.pop(l.nanos(now), flagged)
	if now.Sub(l.swept) >= l.pol.IdleHold()/4 {
		l.swept = now
		l.evictIdle(now)
	}
	return due, serial
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
			l.stats.evictedAdmitted.Add(uint64(e.ledger.Issued)) // nothing held: all issued was admitted
		}
	}
}

// idle reports whether e can be evicted without losing anything: no
// consumption for a few rounds, everything reported, nothing held that
// Redis counts as ours, and its bucket not in debt by Redis's last word (a
// key forgotten reads as full to Peek, and to the checks of the Envoy
// service, until refill has repaid the debt). The caller holds e.mu.
func (l *Limiter) idle(now time.Time, e *entry) bool {
	if e.ledger.InFlight || e.ledger.Unacked || e.flagged || e.owes || time.Duration(l.nanos(now)-e.ledger.Use.UsedAt) < 2*l.pol.IdleHold() ||
		e.inDebt(l.nanos(now)) {
		return false
	}
	if !e.isSynced() {
		// Never asked (a part a decision might have turned to): Redis
		// counts nothing for it, and it was given nothing.
		return e.ledger.Issued == 0 && e.avail.Load() == 0
	}
	return l.mode.Idle(&e.ledger, &e.avail)
}

// announce records this instance in the presence set (or removes it),
// reads the live count, and hears of the keys reset since its last call.
func (l *Limiter) announce(ctx context.Context, alive bool) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.roundTimeout)
	defer cancel()
	life := 3*l.cfg.interval + l.cfg.roundTimeout
	flag := "0"
	if alive {
		flag = "1"
	}
	reply, err := scripts.Presence.Run(ctx, l.rdb, []string{l.presence, l.resetLog}, 0, l.cfg.instanceID, life.Microseconds(), flag,
		l.resetsRead.Load(), l.ledgerTTL())
	if err != nil {
		l.stats.countError(err)
		l.presenceFailed(err)
		return fmt.Errorf("sync: presence: %w", err)
	}
	p, err := scripts.ParsePresenceReply(reply)
	if err != nil {
		l.stats.errors[hybridlimit.ErrorMalformed].Add(1)
		err = fmt.Errorf("sync: presence: %w", err)
		l.presenceFailed(err)
		return err
	}
	if l.presenceDown.Swap(false) {
		l.cfg.logger.Info("sync: presence record written again", "live", p.Live)
	}
	if alive {
		l.live.Store(max(p.Live, 1))
		l.heardResets(p)
	}
	return nil
}

// heardResets makes every entry of the keys reset since the last presence
// call, or of every key when the log cannot tell which, drop the denial it
// remembers and sync at once: its message finds its ledger gone, and it
// forgets what it holds (6.1). An entry that holds a denial sends no
// message until the denial lapses, up to a token's time: without this it
// would deny a reset key for as long. An entry that heard of the bucket
// after the reset only syncs early.
func (l *Limiter) heardResets(p scripts.PresenceReply) {
	// A first read takes every reset the log keeps, a ledger TTL's worth:
	// all that can matter, unless this instance was made longer ago.
	first := l.resetsRead.Load() == 0
	if !p.Whole || first && l.cfg.clock.Now().Sub(l.base) > l.ledgerTTLDuration() {
		l.each(func(e *entry) {
			if e.denyUntil.Load() != 0 {
				l.resync(e, true)
			}
		})
	}
	for _, key := range p.Reset {
		l.eachPart(l.table.get(key), func(e *entry) { l.resync(e, true) })
	}
	l.resetsRead.Store(p.Now)
}

// resync drops e's remembered denial and flags it for the next round,
// whose number it returns; with wake, it wakes the loop for that round now.
func (l *Limiter) resync(e *entry, wake bool) (serial uint64) {
	e.denyUntil.Store(0)
	return l.flag(e, 0, wake)
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
	err := l.ownRound(ctx, func() error {
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
	if err != nil {
		return fmt.Errorf("sync: close: final round: %w", err)
	}
	l.probes.Wait()  // a driven loop's
	l.fetches.Wait() // fetchAlone's, cut short by the close
	_ = l.announce(ctx, false)
	l.closedClean = true
	return nil
}
