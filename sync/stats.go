package sync

import (
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"
)

// counters are the Limiter's plain counters; Stats copies them.
type counters struct {
	rounds, roundErrors, messages, scriptCalls, fetches, waits atomic.Uint64
	failOpen, failClosed, fallbackAllowed, fallbackDenied      atomic.Uint64
	evictions                                                  atomic.Uint64
	reshards, moves                                            atomic.Uint64
	lastRound                                                  atomic.Int64
	evictedAdmitted                                            atomic.Uint64 // tokens admitted by entries since evicted
	refunded                                                   atomic.Uint64 // tokens given back by Refund
	dropped                                                    atomic.Uint64 // tokens held under a burst since lowered, spent by no one
	admitted                                                   highWater     // the largest Stats.Admitted reported
	lastSuccess                                                atomic.Int64  // clock reading, in ns since the limiter's base, of the last round Redis answered
	errors                                                     [NumErrorClasses]atomic.Uint64
	roundDuration, roundMessages                               histogram

	// deniedRemote and deniedLocal count every denial, and a key at its
	// limit is denied on every core at once: one shared word cost such a
	// decision 82 ns, against 27-33 ns striped (BenchmarkLimiterDenyEmpty,
	// 2 cores).
	deniedRemote, deniedLocal *xsync.Counter
}

// highWater is a counter that only moves up.
type highWater struct{ v atomic.Uint64 }

// raise returns the largest of x and every value raised before.
func (h *highWater) raise(x uint64) uint64 {
	for {
		cur := h.v.Load()
		if x <= cur {
			return cur
		}
		if h.v.CompareAndSwap(cur, x) {
			return x
		}
	}
}

// observeRound records a round that sent msgs key messages and began at
// start, by the wall clock. Round.Send and roundOf call it through exec, so
// it sees periodic, fetch and final rounds alike.
func (c *counters) observeRound(start time.Time, msgs int) {
	c.roundDuration.observe(&roundDuration, int64(time.Since(start)))
	c.roundMessages.observe(&roundMessages, int64(msgs))
}

// countError counts one failed call to Redis by its class.
func (c *counters) countError(err error) { c.errors[classify(err)].Add(1) }

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
	// Owed is the cost FallbackLocal admitted that Redis has not yet
	// taken from the keys' buckets (Reserve mode): each key's next message
	// makes Redis take it, into debt if need be.
	Owed int64
	// BreakerOpen says whether any node's breaker is open; BreakerOpens
	// and BreakerCloses count the switches of every node's. Nodes has
	// each node's.
	BreakerOpen                 bool
	BreakerOpens, BreakerCloses uint64
	Nodes                       []NodeStats
	Evictions                   uint64 // idle keys dropped from memory
	// Reshards counts the keys this instance split or merged back
	// (WithAutoShards); Moves the keys it moved to a new layout, its own
	// reshards and those it heard of from Redis.
	Reshards, Moves uint64
	// SplitKeys is the number of tracked keys split into parts, by
	// WithShards or WithAutoShards.
	SplitKeys int64
	LastRound time.Duration // how long the last background round took
	// Admitted is the cost admitted from allowance, all keys, since New,
	// refunded cost included; Refunded is the cost Refund gave back.
	// Dropped is the allowance dropped unspent when a key's burst was
	// lowered (a lowered limit clamps at once).
	Admitted, Refunded, Dropped uint64
	// Outstanding is the allowance held unspent now, all keys: tokens
	// Redis counts as this instance's (Reserve) or that it may still
	// admit before reporting (Optimistic).
	Outstanding int64
	// SinceSync is how old this instance's view of the global buckets
	// is: the time since Redis last answered a round (0 before the first).
	SinceSync time.Duration
	// BreakerOpenFor is the time the breakers have been open, summed over
	// the nodes, the current stretches included: the time the failure
	// policy was deciding for some keys.
	BreakerOpenFor time.Duration

	// RoundDuration is how long each round took to send its script calls
	// and get their replies, in seconds of wall-clock time. It counts every
	// round that sent at least one key message: the periodic rounds of the
	// loop (and of Sync or Round.Send), the on-demand fetches of decisions
	// out of allowance, and the final round of Close. So its Count is at
	// least Rounds, and at most Rounds + Fetches + 1. Buckets end at 0.5ms,
	// 1ms, 2.5ms, 5ms, ..., 1s and 2.5s.
	RoundDuration Histogram
	// RoundMessages is the number of key messages each of the same rounds
	// carried. Buckets end at the powers of 4 from 1 to 65536.
	RoundMessages Histogram
	// Errors counts failed calls to Redis by class, indexed by ErrorClass:
	// each failed sync script call (a round sends one per slot group and
	// WithMaxKeysPerCall keys, so a failed pipeline counts once per call in
	// it) and each failed presence call (the loop's, Announce's and
	// Close's), which go on while the breaker is open and rounds have
	// nothing to send.
	Errors [NumErrorClasses]uint64
}

// NodeStats is one Redis master's breaker, as the limiter reaches it: the
// node's address (for a client that is not a cluster client, its address
// or "redis"), whether its breaker is open, and for how long it has been
// open in all, the current stretch included.
type NodeStats struct {
	Addr        string
	BreakerOpen bool
	OpenFor     time.Duration
}

// Stats returns a snapshot of the counters.
func (l *Limiter) Stats() Stats {
	c := &l.stats
	l.retiring.RLock()
	admitted, outstanding, split := c.evictedAdmitted.Load()+c.refunded.Load()-c.dropped.Load(), int64(0), int64(0)
	l.each(func(e *entry) {
		l.lock(e)
		held, consumed := e.snapshot()
		l.unlock(e)
		admitted += uint64(consumed)
		outstanding += held
		if e.shards > 1 && e.key == e.owner {
			split++
		}
	})
	l.retiring.RUnlock()
	// A refund moves cost out of an entry and into the refunded count in
	// one step the walk above may see half done: Admitted, a counter, is
	// kept from going down meanwhile.
	admitted = c.admitted.raise(admitted)
	now := l.cfg.clock.Now()
	var since time.Duration
	if last := c.lastSuccess.Load(); last != 0 {
		since = time.Duration(l.nanos(now) - (last - 1))
	}
	var errs [NumErrorClasses]uint64
	for i := range errs {
		errs[i] = c.errors[i].Load()
	}
	openFor, anyOpen := time.Duration(l.nodes.openTotal.Load()), false
	var nodes []NodeStats
	for _, n := range l.nodes.all() {
		ns := NodeStats{Addr: n.addr, BreakerOpen: n.breaker.isOpen(), OpenFor: n.breaker.openFor(now)}
		openFor += ns.OpenFor
		anyOpen = anyOpen || ns.BreakerOpen
		nodes = append(nodes, ns)
	}
	return Stats{
		RoundDuration:   c.roundDuration.snapshot(&roundDuration),
		RoundMessages:   c.roundMessages.snapshot(&roundMessages),
		Errors:          errs,
		Admitted:        admitted,
		Refunded:        c.refunded.Load(),
		Dropped:         c.dropped.Load(),
		Outstanding:     outstanding,
		SinceSync:       since,
		BreakerOpenFor:  openFor,
		Keys:            l.tracked.Load(),
		LiveInstances:   l.live.Load(),
		Rounds:          c.rounds.Load(),
		RoundErrors:     c.roundErrors.Load(),
		Fetches:         c.fetches.Load(),
		Messages:        c.messages.Load(),
		ScriptCalls:     c.scriptCalls.Load(),
		Waits:           c.waits.Load(),
		DeniedRemote:    uint64(c.deniedRemote.Value()),
		DeniedLocal:     uint64(c.deniedLocal.Value()),
		FailOpen:        c.failOpen.Load(),
		FailClosed:      c.failClosed.Load(),
		FallbackAllowed: c.fallbackAllowed.Load(),
		FallbackDenied:  c.fallbackDenied.Load(),
		Owed:            l.debts.total(),
		BreakerOpen:     anyOpen,
		BreakerOpens:    l.nodes.opens.Load(),
		BreakerCloses:   l.nodes.closes.Load(),
		Nodes:           nodes,
		Evictions:       c.evictions.Load(),
		Reshards:        c.reshards.Load(),
		SplitKeys:       split,
		Moves:           c.moves.Load(),
		LastRound:       time.Duration(c.lastRound.Load()),
	}
}
