package sync

import (
	"context"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
	"github.com/hybridlimit/hybridlimit/sync/internal/account"
)

// message is what one round says to Redis about one entry, and the reply.
type message struct {
	e     *entry
	key   *hybridlimit.Limit // the key's limit as the message was prepared
	limit hybridlimit.Limit  // the part's
	group int                // the slot group of the part's keys
	wire  scripts.SyncMsg    // what Redis is told
	reply scripts.SyncReply
	ok    bool // the reply came and checked out
}

// round is one reconcile round: the messages prepared at one time, sent
// (transport) and applied when the replies arrive. Preparing, sending and
// applying are separate steps so that a driver in virtual time can let
// time pass between them.
type round struct {
	l      *Limiter
	at     time.Time // when it was prepared
	fetch  bool      // run on demand for decisions out of allowance, not by the loop
	serial uint64    // the round's serial, if it took the flagged entries
	err    error     // the error of its calls, once sent
	msgs   []message
	// rejoin holds the keys of entries that heard nothing from Redis for
	// too long to trust their moved layout (see prepareEntry).
	rejoin []string
}

// roundOf prepares, sends and applies one round for entries.
func (l *Limiter) roundOf(ctx context.Context, entries []*entry, final bool) error {
	r := l.prepare(l.cfg.clock.Now(), entries, final)
	err := l.tr.send(ctx, r.msgs)
	r.apply(l.cfg.clock.Now())
	return err
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
	if r.serial > 0 {
		r.l.finished.publish(r.serial, r.err)
	}
}

// singleRound runs f unless a round is already running, in which case it
// waits for that round and returns its error instead.
func (l *Limiter) singleRound(f func() error) error {
	_, err, _ := l.rounds.Do("round", func() (any, error) { return nil, f() })
	return err
}

// ownRound runs f as a round of its own: a round already running (a
// fetch's, whose decisions may have returned before its goroutine leaves
// it) makes singleRound wait for it without running f, so it goes again
// until f has run or ctx ends. It returns f's error, or ctx's.
func (l *Limiter) ownRound(ctx context.Context, f func() error) error {
	for {
		ran := false
		err := l.singleRound(func() error {
			ran = true
			return f()
		})
		if ran {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// prepare computes a message for each entry that has something to say,
// marks them in flight, and returns the round.
func (l *Limiter) prepare(now time.Time, entries []*entry, final bool) *round {
	// Not sized for all the entries: most due in a steady round have
	// nothing to say, and the slice would cost more than composing.
	r := &round{l: l, at: now}
	for _, e := range entries {
		l.lockGather(e)
		if m, ok := r.prepareEntry(now, e, final); ok {
			r.msgs = append(r.msgs, m)
		}
		l.scatterUnlock(e)
	}
	return r
}

// prepareEntry composes e's message, if it has something to say, and
// marks it in flight; else it schedules e's next look. The caller holds
// e.mu.
func (r *round) prepareEntry(now time.Time, e *entry, final bool) (message, bool) {
	l := r.l
	if e.ledger.InFlight || e.isDead() {
		e.flagged = false
		return message{}, false
	}
	last := final
	if l.outOfTouch(e, now) {
		// A moved layout's markers, which send its instances on when the
		// key moves again, are not renewed: after a gap this long they may
		// have lapsed, and a lapsed marker reads as a full bucket. Go back
		// through the configured layout, whose markers are kept, rather
		// than spend a layout no one else uses.
		r.rejoin = append(r.rejoin, e.owner)
		if !e.ledger.Unacked {
			e.flagged, e.ledger.Waiting = false, 0
			l.sched.at(e, l.nanos(now)) // again next tick, if the move waits
			return message{}, false
		}
		// Its last message may have been granted, the reply lost: hand
		// everything back and ask for nothing, so that the reply's total
		// recovers the grant (and a lapsed bucket grants none) before the
		// move.
		last = true
	}
	l.mode.Lapse(&e.ledger, &e.avail, l.nanos(now))
	if !final && l.looping.Load() && l.nodes.of(int(e.group)).breaker.isOpen() {
		// Its node is failing: the loop's probe asks it, not a round every
		// other node's keys would wait for. Without the loop the rounds
		// themselves are the probe.
		e.flagged, e.ledger.Waiting = false, 0
		l.sched.at(e, l.nanos(now.Add(l.cfg.interval)))
		return message{}, false
	}
	m, send := l.compose(now, e, last)
	e.flagged, e.ledger.Waiting = false, 0
	if !send {
		if e.avail.Load() > 0 {
			// Nothing to say yet: look again when the allowance may run
			// low. An entry that holds none waits for a decision to flag
			// it instead.
			h := l.view(e, partLimit(e), now)
			l.sched.at(e, l.nanos(now.Add(l.pol.Quiet(h, seed(e)))))
			l.markRideBelow(e, h)
		}
		return message{}, false
	}
	if l.cfg.auto.Max > 0 {
		l.heat.add(e.owner)
	}
	m.e, m.key, m.group = e, e.limit.Load(), int(e.group)
	m.wire.Seq, m.wire.Epoch = l.seq.Add(1), e.epoch
	e.ledger.Sending(l.nanos(now))
	return m, true
}

// compose computes e's message (account.Ledger.Compose), having measured
// e's demand. The caller holds e.mu.
func (l *Limiter) compose(now time.Time, e *entry, final bool) (message, bool) {
	limit := partLimit(e)
	t := l.nanos(now)
	e.ledger.Use.Observe(e.consumed(), t, l.cfg.interval)
	k := account.Look{
		T: t, Holding: l.view(e, limit, now),
		Synced: e.isSynced(), Flagged: e.flagged, Closed: l.closed.Load(),
	}
	if d := l.owing.get(e); d != nil && d.Owed > 0 {
		k.Owed, k.Since = d.Owed, d.Since
	}
	wire, send, let := e.ledger.Compose(l.mode, &e.avail, k, limit, final)
	l.stats.dropped.Add(uint64(let))
	return message{limit: limit, wire: wire}, send
}

// view returns what the lease policy knows of e under limit, its part's,
// at now. The caller holds e.mu.
func (l *Limiter) view(e *entry, limit hybridlimit.Limit, now time.Time) account.Holding {
	return account.Holding{
		Limit:   limit,
		Key:     *e.limit.Load(),
		Live:    max(l.live.Load(), 1),
		Demand:  e.ledger.Use.Rate,
		Held:    e.avail.Load(),
		Left:    e.left.Load(),
		Unused:  time.Duration(l.nanos(now) - e.ledger.Use.UsedAt),
		Full:    e.isSynced() && account.Full(limit, e.left.Load(), l.nanos(now)-e.heardAt.Load()),
		Serving: e.key == e.owner || l.turnedTo(e, now),
	}
}

// markRideBelow sets the allowance under which a decision puts e on the
// riders (account.Policy.RideBelow) to what h, e's holding now, says. A
// key spread over per-CPU counters is left to its visits: a decision
// there learns what its own counter holds, not the key, and such a key's
// demand brings its visits at half its time to run out. The caller holds
// e.mu.
func (l *Limiter) markRideBelow(e *entry, h account.Holding) {
	below := l.pol.RideBelow(h)
	if e.stripes.Load() != nil {
		below = 0
	}
	e.rideBelow.Store(int32(min(below, math.MaxInt32)))
}

// lowLimit reports whether e's key, split or whole, is decided per request
// (account.Policy.IsLowLimit). It reads nothing e.mu guards.
func (l *Limiter) lowLimit(e *entry) bool {
	return l.pol.IsLowLimit(*e.limit.Load(), l.live.Load())
}

// seed returns what jitters e's next sync: deterministic, and different
// for each key and reply.
func seed(e *entry) uint64 { return uint64(e.epoch) ^ uint64(e.ledger.Acked) }

// ledgerTTL is how long a ledger outlives its last message, in
// milliseconds: long enough that no message still in flight can find it
// gone, and a ledger that does lapse only costs a full-total resend.
func (l *Limiter) ledgerTTL() int64 { return l.ledgerTTLDuration().Milliseconds() }

func (l *Limiter) ledgerTTLDuration() time.Duration { return max(time.Minute, 20*l.cfg.interval) }

// apply folds the replies into the entries and schedules their next sync.
func (r *round) apply(now time.Time) {
	l := r.l
	r.renumber()
	l.stats.answered(r, l.nanos(now))
	var moved []*message
	var reset []*entry
	for i := range r.msgs {
		m := &r.msgs[i]
		e := m.e
		l.lockGather(e)
		e.ledger.Answered(m.ok)
		next := l.nanos(now) // no reply: say it again next tick
		switch {
		case m.ok && m.reply.Reset:
			reset = append(reset, e)
		case m.ok:
			l.applyReply(now, e, m)
			if m.reply.Moved() {
				moved = append(moved, m)
			}
			next = e.ledger.NextSync
		}
		l.scatterUnlock(e)
		l.sched.at(e, next)
	}
	r.relocate(now, moved, reset)
	l.stats.messages.Add(uint64(len(r.msgs)))
}

// renumber drops the replies to messages a ledger numbered past.
func (r *round) renumber() {
	l := r.l
	for i := range r.msgs {
		if m := &r.msgs[i]; m.ok && m.reply.LedgerSeq > m.wire.Seq {
			// Not applied: the ledger is numbered past this message by an
			// earlier run of this instance (same id) whose clock was
			// ahead. Number on from there, under a new epoch (a new total),
			// and say it again: until then nothing is granted, and
			// nothing this instance admitted is counted.
			l.seqPast(m.reply.LedgerSeq)
			l.lockGather(m.e)
			m.e.epoch = l.seq.Add(1)
			l.scatterUnlock(m.e)
			m.ok = false
		}
	}
}

// seqPast raises the next sequence number above seq.
func (l *Limiter) seqPast(seq int64) {
	for {
		cur := l.seq.Load()
		if cur >= seq || l.seq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// applyReply folds one reply into e. The caller holds e.mu.
func (l *Limiter) applyReply(now time.Time, e *entry, m *message) {
	t := l.nanos(now)
	e.heardAt.Store(t)
	e.marks.Or(markSynced)
	// Taken, or reported; a closed part took nothing, and the move
	// carries it.
	l.owing.answered(e, m, !m.reply.Moved(), e.ledger.SentAt)
	k := account.Look{T: t, Owed: l.owing.owed(e), Closed: l.closed.Load()}
	left := e.ledger.Apply(l.mode, &e.avail, k, m.wire, m.reply)
	l.heardLeft(e, left)
	e.resetAfter.Store(int64(time.Duration(m.reply.ResetUS) * time.Microsecond))
	h := l.view(e, m.limit, now)
	e.ledger.NextSync = t + int64(l.pol.Next(h, seed(e)))
	l.markRideBelow(e, h)
	switch {
	case m.reply.RetryUS > 0:
		e.denyUntil.Store(l.emptyUntil(now, e, m))
		e.deniedFor.Store(limitHash(*m.key))
	case l.mode.Starved(m.reply):
		// Ask at the next round rather than at every denial.
		e.denyUntil.Store(e.ledger.NextSync)
		e.deniedFor.Store(limitHash(*m.key))
	default:
		e.denyUntil.Store(0)
	}
}

// emptyUntil returns until when e denies locally after Redis said its
// bucket is empty (account.EmptyUntil). The caller holds e.mu and has set
// e.ledger.NextSync.
func (l *Limiter) emptyUntil(now time.Time, e *entry, m *message) int64 {
	retry := int64(time.Duration(m.reply.RetryUS) * time.Microsecond)
	return account.EmptyUntil(l.nanos(now), retry, e.ledger.NextSync, !l.lowLimit(e), e.resharded(), l.cfg.interval)
}
