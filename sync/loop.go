package sync

import (
	"context"
	"errors"
	"fmt"
	stdsync "sync"
	"time"

	"github.com/hybridlimit/hybridlimit/lua"
)

// ErrRunning is returned by Start and Run when the loop already runs.
var ErrRunning = errors.New("sync: loop already running")

// Start runs the sync loop in a new goroutine until Close. It is Run in a
// goroutine that Close waits for.
func (l *Limiter) Start() error {
	l.life.Lock()
	defer l.life.Unlock()
	if err := l.claimLoop(); err != nil {
		return err
	}
	go l.loop(context.Background())
	return nil
}

// Run runs the sync loop in the calling goroutine until ctx ends or Close
// is called, and returns nil after Close or ctx.Err().
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
	case l.running:
		return ErrRunning
	}
	l.running = true
	l.looping.Store(true)
	l.stop = make(chan struct{})
	l.done = make(chan struct{})
	return nil
}

func (l *Limiter) loop(ctx context.Context) error {
	defer close(l.done)
	defer l.looping.Store(false)
	var probes stdsync.WaitGroup
	defer probes.Wait()
	t := time.NewTicker(l.tick())
	defer t.Stop()
	var lastPresence, lastReshard time.Time
	for {
		select {
		case <-ctx.Done():
			l.life.Lock()
			l.running = false // a later Start or Run may loop again
			l.life.Unlock()
			return ctx.Err()
		case <-l.stop:
			return nil
		case <-t.C:
		case <-l.wake:
		}
		now := l.cfg.clock.Now()
		l.refreshNodes(ctx, now)
		for _, n := range l.nodes.all() {
			if n.breaker.isOpen() {
				l.probe(n, &probes)
			}
		}
		if now.Sub(lastPresence) >= l.cfg.interval {
			_ = l.Announce(ctx)
			lastPresence = now
		}
		l.Sync(ctx)
		if now.Sub(lastReshard) >= l.cfg.interval {
			if err := l.Reshard(ctx); err != nil {
				l.cfg.logger.Debug("sync: reshard", "err", err)
			}
			lastReshard = now
		}
	}
}

// refreshNodes points each slot group at the master serving it now, on a
// cluster client.
func (l *Limiter) refreshNodes(ctx context.Context, now time.Time) {
	if cc, ok := l.rdb.(masterForKey); ok {
		l.nodes.refresh(ctx, cc, l.probeKeys, now)
	}
}

// Sync runs one reconcile round now, for every entry that is due or
// flagged, and evicts idle entries. The loop calls it every quarter sync
// interval; call it yourself only to drive a Limiter without the loop. If
// a round is already running, Sync waits for it instead. After Close it
// returns ErrClosed.
func (l *Limiter) Sync(ctx context.Context) error {
	if l.closed.Load() {
		// The final round handed everything back: a round now would
		// lease again, and nothing would return it.
		return ErrClosed
	}
	return l.exclusive(func() error {
		r := l.BeginRound()
		err := r.Send(ctx)
		r.Finish()
		return err
	})
}

// Round is one reconcile round split into its steps, so that a simulator
// in virtual time can let time pass between sending and the replies'
// arrival. Sync runs the same three steps back to back.
type Round struct {
	r *round
}

// BeginRound prepares a message for every entry due or flagged at the
// clock's time, and evicts idle entries now and then. Rounds must not
// overlap: use either the loop or BeginRound, not both.
func (l *Limiter) BeginRound() *Round {
	if l.closed.Load() {
		return &Round{r: &round{l: l}} // nothing to say after Close (see Sync)
	}
	now := l.cfg.clock.Now()
	return &Round{r: l.prepare(now, l.sweep(now), false)}
}

// Send sends the round's script calls, bounded by the round timeout.
func (r *Round) Send(ctx context.Context) error {
	l := r.r.l
	if len(r.r.msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.roundTimeout)
	defer cancel()
	start := time.Now()
	err := r.r.exec(ctx)
	l.stats.rounds.Add(1)
	l.stats.lastRound.Store(int64(time.Since(start)))
	if err != nil {
		l.stats.roundErrors.Add(1)
	}
	return err
}

// Finish applies the replies at the clock's time.
func (r *Round) Finish() { r.r.apply(r.r.l.cfg.clock.Now()) }

// Messages returns the number of keys the round carries.
func (r *Round) Messages() int { return len(r.r.msgs) }

// sweep returns the entries flagged or due for a sync by the schedule,
// and every quarter of the idle hold evicts the idle entries: the one walk
// over every entry, which is why it is not made every tick.
func (l *Limiter) sweep(now time.Time) []*entry {
	due := l.sched.take(l.nanos(now), l.takeFlagged())
	if now.Sub(l.swept) >= l.idleHold()/4 {
		l.swept = now
		l.evictIdle(now)
	}
	return due
}

// evictIdle removes from the tables the entries that hold nothing and have
// not been used for twice the idle hold.
func (l *Limiter) evictIdle(now time.Time) {
	var idle []*entry
	l.each(func(e *entry) {
		l.lock(e)
		if l.idle(now, e) {
			idle = append(idle, e)
		}
		l.unlock(e)
	})
	l.retiring.Lock()
	defer l.retiring.Unlock()
	for _, e := range idle {
		l.lock(e)
		gone := l.idle(now, e) && e.evict()
		l.unlock(e)
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
	if e.inflight || e.unacked || e.flagged || e.owes || time.Duration(l.nanos(now)-e.usedAt) < 2*l.idleHold() {
		return false
	}
	if !e.synced.Load() {
		// Never asked (a part a decision might have turned to): Redis
		// counts nothing for it, and it was given nothing.
		return e.issued == 0 && e.avail.Load() == 0
	}
	if l.cfg.mode == Optimistic {
		// Below acked only after a refund of what was reported: nothing
		// left to say.
		if e.consumed() > e.acked {
			return false
		}
		e.take(e.avail.Load()) // self-issued allowance: nothing in Redis
		return true
	}
	return e.avail.Load() == 0 && e.issued == e.acked
}

// Announce records this instance as alive in Redis and reads the live
// instance count, which sizes the low-limit rule, the fallback shares and
// the Optimistic allowances. The loop calls it every sync interval; call it
// yourself only to drive a Limiter without the loop.
// After Close it returns ErrClosed: recorded again, a closed instance
// would count as live and shrink the others' shares.
func (l *Limiter) Announce(ctx context.Context) error {
	if l.closed.Load() {
		return ErrClosed
	}
	return l.announce(ctx, true)
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
	reply, err := lua.Presence.Run(ctx, l.rdb, []string{l.presence}, 0, l.cfg.instanceID, life.Microseconds(), flag)
	if err != nil {
		l.stats.countError(err)
		l.presenceFailed(err)
		return fmt.Errorf("sync: presence: %w", err)
	}
	n, ok := reply.(int64)
	if !ok {
		l.stats.errors[ErrorMalformed].Add(1)
		err := fmt.Errorf("sync: presence: %w: %T", lua.ErrMalformedReply, reply)
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

// Close stops the loop, hands back unused allowance and reports consumption
// in one final round, and removes this instance from the presence set. It
// waits for the loop within ctx. A Close that failed (ctx ended, Redis
// unreachable) can be called again to finish the work; once one has
// returned nil, later calls return nil at once. Decisions after the first
// Close return ErrClosed once the local allowance is spent.
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
	_ = l.announce(ctx, false)
	l.closedClean = true
	return nil
}
