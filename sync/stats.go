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
	lastRound                                                  atomic.Int64
}

// Stats is a snapshot of a Limiter's counters, for metrics. Decisions made
// from local allowance are not counted one by one (that would put a shared
// counter on the request path); Admitted sums them from the entries.
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
	Evictions uint64        // idle keys dropped from memory
	LastRound time.Duration // how long the last background round took
}

// Stats returns a snapshot of the counters.
func (l *Limiter) Stats() Stats {
	c := &l.stats
	return Stats{
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
		LastRound:       time.Duration(c.lastRound.Load()),
	}
}
