package sync

import (
	"sync/atomic"
	"time"
)

// counters are the Limiter's plain counters; Stats copies them.
type counters struct {
	rounds, roundErrors, messages, scriptCalls, fetches, waits atomic.Uint64
	deniedRemote, deniedLocal                                  atomic.Uint64
	failOpen, failClosed, fallbackAllowed, fallbackDenied      atomic.Uint64
	overspent, evictions                                       atomic.Uint64
	reshards, moves                                            atomic.Uint64
	lastRound                                                  atomic.Int64
	evictedAdmitted                                            atomic.Uint64 // tokens admitted by entries since evicted
	lastSuccess                                                atomic.Int64  // clock reading, in ns since the limiter's base, of the last round Redis answered
}

// Stats is a snapshot of a Limiter's counters, for metrics. Decisions made
// from local allowance are not counted one by one (that would put a shared
// counter on the request path); Admitted sums them from the entries, so
// Stats costs a pass over the tracked keys.
type Stats struct {
	Keys          int64  // keys tracked in memory
	LiveInstances int64  // instances alive in Redis, as last seen
	Rounds        uint64 // background rounds run
	RoundErrors   uint64 // background rounds with at least one failed call
	Fetches       uint64 // on-demand rounds run for decisions out of allowance
	Messages      uint64 // key messages sent to Redis
	ScriptCalls   uint64 // script calls sent to Redis
	Waits         uint64 // decisions that waited for a fetch
	DeniedRemote  uint64 // decisions denied because Redis said the bucket is empty
	DeniedLocal   uint64 // decisions denied for want of allowance, without waiting (any longer)
	// Decisions made by the failure policy.
	FailOpen, FailClosed, FallbackAllowed, FallbackDenied uint64
	BreakerOpen                                           bool
	BreakerOpens, BreakerCloses                           uint64
	// Overspent counts tokens admitted beyond what Redis granted; only a
	// ledger lost with tokens in it can cause that. It should stay 0.
	Overspent uint64
	Evictions uint64 // idle keys dropped from memory
	// Reshards counts the keys this instance split or merged back
	// (WithAutoShards); Moves the keys it moved to a new layout, its own
	// reshards and those it heard of from Redis.
	Reshards, Moves uint64
	LastRound       time.Duration // how long the last background round took
	// Admitted is the cost admitted from allowance, all keys, since New.
	Admitted uint64
	// Outstanding is the allowance held unspent now, all keys: tokens
	// Redis counts as this instance's (Reserve) or that it may still
	// admit before reporting (Optimistic).
	Outstanding int64
	// SinceSync is how old this instance's view of the global buckets
	// is: the time since Redis last answered a round (0 before the first).
	SinceSync time.Duration
	// BreakerOpenFor is the total time the breaker has been open, the
	// current stretch included: the time the failure policy was deciding.
	BreakerOpenFor time.Duration
}

// Stats returns a snapshot of the counters.
func (l *Limiter) Stats() Stats {
	c := &l.stats
	admitted, outstanding := c.evictedAdmitted.Load(), int64(0)
	l.each(func(e *entry) {
		e.mu.Lock()
		held, consumed := e.snapshot()
		e.mu.Unlock()
		admitted += uint64(consumed)
		outstanding += held
	})
	now := l.cfg.clock.Now()
	var since time.Duration
	if last := c.lastSuccess.Load(); last != 0 {
		since = time.Duration(l.nanos(now) - (last - 1))
	}
	return Stats{
		Admitted:        admitted,
		Outstanding:     outstanding,
		SinceSync:       since,
		BreakerOpenFor:  l.breaker.openFor(now),
		Keys:            l.tracked.Load(),
		LiveInstances:   l.live.Load(),
		Rounds:          c.rounds.Load(),
		RoundErrors:     c.roundErrors.Load(),
		Fetches:         c.fetches.Load(),
		Messages:        c.messages.Load(),
		ScriptCalls:     c.scriptCalls.Load(),
		Waits:           c.waits.Load(),
		DeniedRemote:    c.deniedRemote.Load(),
		DeniedLocal:     c.deniedLocal.Load(),
		FailOpen:        c.failOpen.Load(),
		FailClosed:      c.failClosed.Load(),
		FallbackAllowed: c.fallbackAllowed.Load(),
		FallbackDenied:  c.fallbackDenied.Load(),
		BreakerOpen:     l.breaker.isOpen(),
		BreakerOpens:    l.breaker.opens.Load(),
		BreakerCloses:   l.breaker.closes.Load(),
		Overspent:       c.overspent.Load(),
		Evictions:       c.evictions.Load(),
		Reshards:        c.reshards.Load(),
		Moves:           c.moves.Load(),
		LastRound:       time.Duration(c.lastRound.Load()),
	}
}
