package sync

import (
	"context"
	"errors"
	stdsync "sync"
	"time"
)

// A decision out of allowance flags its key (flag) and waits for a round
// that carries it: the rounds that take the flagged entries are numbered,
// and the decision waits for the first that began after its flag. One
// goroutine of the decisions', the fetcher, runs those rounds, one after
// another while keys are flagged: each once the fetch linger has passed,
// so that the keys of the decisions asking meanwhile travel together. The
// loop's rounds take the flagged entries too; rounds never overlap. A
// Driver runs the fetches in virtual time instead.

// errFetchTimeout is what a decision records when Redis did not answer its
// fetch within the max wait.
var errFetchTimeout = errors.New("sync: no reply within the max wait")

// finished tells the decisions waiting for a round when it is over.
type finished struct {
	mu     stdsync.Mutex
	serial uint64        // the last round of flagged entries that finished
	err    error         // the error of its calls
	next   chan struct{} // closed when the next one finishes
}

// publish records that round serial finished with err.
func (f *finished) publish(serial uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.serial, f.err = max(f.serial, serial), err
	if f.next != nil {
		close(f.next)
		f.next = nil
	}
}

// after returns whether round serial finished, with the error of the last
// round that did; else a channel closed when the next round finishes.
func (f *finished) after(serial uint64) (bool, error, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.serial >= serial {
		return true, f.err, nil
	}
	if f.next == nil {
		f.next = make(chan struct{})
	}
	return false, nil, f.next
}

// fetch asks for round serial, the one that carries the key a decision
// flagged, and waits for it until deadline or the end of ctx, returning
// the error of its calls.
func (l *Limiter) fetch(ctx context.Context, serial uint64, deadline time.Time) error {
	if l.driver != nil {
		err := l.driver.Await(driven{l}, deadline)
		if errors.Is(err, ErrExpired) {
			return errFetchTimeout
		}
		return err
	}
	if l.fetcher.CompareAndSwap(false, true) {
		// Under life, against Close: its wait for the goroutine follows
		// every Add, or this sees it closed.
		l.life.Lock()
		if l.closed.Load() {
			l.life.Unlock()
			l.fetcher.Store(false)
			return ErrClosed
		}
		l.fetches.Add(1)
		l.life.Unlock()
		go l.fetchAlone()
	}
	// On the limiter's clock, as every wait.
	expired, stop := after(l.cfg.clock, deadline.Sub(l.cfg.clock.Now()))
	defer stop()
	for {
		done, err, next := l.finished.after(serial)
		if done {
			return err
		}
		select {
		case <-next:
		case <-ctx.Done():
			return ctx.Err()
		case <-expired:
			// Only the round's own outcome counts for the breakers: a
			// decision's patience says nothing certain about Redis.
			return errFetchTimeout
		case <-l.closedCh:
			return ErrClosed
		}
	}
}

// spent puts e on the riders when a decision's cost took its allowance
// from its ride mark or above to left, below it
// (account.Policy.RideBelow): the next call to e's node, a round's or a
// fetch's, carries its top-up, which its next visit might bring after the
// allowance has run out. A key waits for no call of its own; one whose
// node is called before its visit tops up sooner, at the cost of a
// message, not a call.
func (l *Limiter) spent(e *entry, left, cost int64) {
	if below := int64(e.rideBelow.Load()); left >= below || left+cost < below {
		return
	}
	e.mu.Lock()
	already := e.riding
	e.riding = true
	e.mu.Unlock()
	if !already {
		l.flagMu.Lock()
		l.riders = append(l.riders, e)
		l.flagMu.Unlock()
	}
}

// carryRiders adds to r the riders whose nodes r calls and which are
// still under their ride marks; the riders of other nodes wait for the
// next round, unless they are dead or topped up since. It keeps what r's
// entries already said: a rider in flight in r is not composed again.
func (l *Limiter) carryRiders(r *round) {
	if len(r.msgs) == 0 {
		return
	}
	l.flagMu.Lock()
	riders := l.riders
	l.riders = nil
	l.flagMu.Unlock()
	if len(riders) == 0 {
		return
	}
	called := make(map[*node]bool, 4)
	for _, m := range r.msgs {
		called[l.nodes.of(m.group)] = true
	}
	var wait []*entry
	for _, e := range riders {
		low := !e.isDead() && e.avail.Load() < int64(e.rideBelow.Load())
		carried := called[l.nodes.of(int(e.group))]
		if low && !carried {
			wait = append(wait, e)
			continue
		}
		l.lockGather(e)
		e.riding = false
		if carried && !e.ledger.InFlight && e.avail.Load() < int64(e.rideBelow.Load()) {
			if m, ok := r.prepareEntry(r.at, e, false); ok {
				r.msgs = append(r.msgs, m)
			}
		}
		l.scatterUnlock(e)
	}
	if len(wait) > 0 {
		l.flagMu.Lock()
		l.riders = append(l.riders, wait...)
		l.flagMu.Unlock()
	}
}

// flag asks for an early sync of e, adding cost to what it waits for, and
// returns the number of the round that will carry it. With wake, it wakes
// the loop for a round now; a decision that waits for the round asks for
// it through fetch instead, which lets others ask first (the linger).
func (l *Limiter) flag(e *entry, cost int64, wake bool) (serial uint64) {
	l.lockGather(e)
	e.ledger.Waiting += cost
	already := e.flagged
	e.flagged = true
	l.scatterUnlock(e)
	l.flagMu.Lock()
	if !already {
		l.flagged = append(l.flagged, e)
	}
	// The next round to take the flagged entries carries e: it is in the
	// list, or in a round that took it and has not composed its message.
	serial = l.serial + 1
	l.flagMu.Unlock()
	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return serial
}

// fetchAlone is the fetcher: it runs the rounds of flagged entries until
// none is left, one such goroutine at a time (l.fetcher), which Close
// waits for. Each round waits for the fetch linger first, and is bounded
// by the round timeout, so that decisions can stop waiting at their
// deadlines even with a client that does not honour context deadlines.
func (l *Limiter) fetchAlone() {
	defer l.fetches.Done()
	for {
		if !l.closed.Load() {
			l.linger()
			err := l.singleRound(func() error {
				r := l.fetchRound()
				err := r.Send(context.Background())
				r.Finish()
				return err
			})
			if err != nil {
				l.cfg.logger.Debug("sync: fetch failed", "err", err)
			}
		}
		// Hand the job back, then take it again if a decision flagged a
		// key meanwhile and found the job taken.
		l.fetcher.Store(false)
		if l.closed.Load() || !l.anyFlagged() || !l.fetcher.CompareAndSwap(false, true) {
			return
		}
	}
}

// linger waits the fetch linger on the limiter's clock, or until Close.
func (l *Limiter) linger() {
	if l.cfg.linger <= 0 {
		return
	}
	done, stop := after(l.cfg.clock, l.cfg.linger)
	defer stop()
	select {
	case <-done:
	case <-l.closedCh:
	}
}

// fetchRound begins the round of the entries decisions flagged.
func (l *Limiter) fetchRound() *round {
	l.stats.fetches.Add(1)
	entries, serial := l.takeFlagged()
	r := l.prepare(l.cfg.clock.Now(), entries, false)
	r.fetch, r.serial = true, serial
	l.carryRiders(r)
	return r
}

// takeFlagged returns the flagged entries and the number of the round
// that takes them.
func (l *Limiter) takeFlagged() ([]*entry, uint64) {
	l.flagMu.Lock()
	defer l.flagMu.Unlock()
	es := l.flagged
	l.flagged = nil
	l.serial++
	return es, l.serial
}

// anyFlagged reports whether an entry waits for a round.
func (l *Limiter) anyFlagged() bool {
	l.flagMu.Lock()
	defer l.flagMu.Unlock()
	return len(l.flagged) > 0
}
