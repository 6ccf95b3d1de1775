package sync

import (
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/histogram"
	"github.com/puzpuzpuz/xsync/v4"
)

// counters are the Limiter's plain counters; Stats copies them.
type counters struct {
	rounds, roundErrors, messages, scriptCalls, fetches, waits atomic.Uint64
	elsewhere                                                  atomic.Uint64 // messages a node answered elsewhere
	failOpen, failClosed, fallbackAllowed, fallbackDenied      atomic.Uint64
	evictions                                                  atomic.Uint64
	reshards, moves                                            atomic.Uint64
	lastRound                                                  atomic.Int64
	evictedAdmitted                                            atomic.Uint64 // tokens admitted by entries since evicted
	refunded                                                   atomic.Uint64 // tokens given back by Refund
	charged                                                    atomic.Uint64 // tokens charged by Charge
	dropped                                                    atomic.Uint64 // tokens granted and spent by no one: held under a burst since lowered, or let go idle
	admitted                                                   highWater     // the largest Stats.Admitted reported
	lastSuccess                                                atomic.Int64  // clock reading, in ns since the limiter's base, plus 1, of the last round Redis answered; 0 if none
	unanswered                                                 atomic.Int64  // the same of when the first round Redis did not answer since was prepared; 0 if none
	errors                                                     [hybridlimit.NumErrorClasses]atomic.Uint64
	roundDuration, roundMessages                               histogram.Recorder

	// deniedRemote and deniedLocal count every denial, and a key at its
	// limit is denied on every core at once: striped, the counters keep
	// the cores from fighting over one cache line for every such decision
	// (BenchmarkLimiterDenyEmpty).
	deniedRemote, deniedLocal *xsync.Counter
	// deniedDebt counts the denials, of either kind, of keys whose bucket
	// Redis last said is in debt (entry.inDebt): striped for the same
	// reason.
	deniedDebt *xsync.Counter
}

// denied counts a denial of e's key at now (ns of the limiter's clock) in
// by, and in deniedDebt too while e's bucket is in debt.
func (c *counters) denied(by *xsync.Counter, e *entry, now int64) {
	by.Inc()
	if e.inDebt(now) {
		c.deniedDebt.Inc()
	}
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
	c.roundDuration.Observe(&roundDuration, int64(time.Since(start)))
	c.roundMessages.Observe(&roundMessages, int64(msgs))
}

// countError counts one failed call to Redis by its class.
func (c *counters) countError(err error) { c.errors[classify(err)].Add(1) }

// Stats is a snapshot of a Limiter's counters, for metrics. Decisions
// from local allowance are not counted one by one (a shared counter on the
// request path); Admitted sums them from the entries, so Stats costs a
// pass over the tracked keys. docs/design.md 6.9 says more of each.
type Stats struct {
	Keys          int64  // keys tracked in memory
	LiveInstances int64  // instances alive in Redis, as last seen
	Rounds        uint64 // background rounds run
	RoundErrors   uint64 // background rounds with a failed call
	Fetches       uint64 // rounds run on demand for decisions out of allowance
	Messages      uint64 // key messages sent to Redis
	ScriptCalls   uint64 // script calls sent to Redis
	Elsewhere     uint64 // key messages a node no longer serving their slot answered without applying (sent again)
	Waits         uint64 // decisions that waited for a fetch
	DeniedRemote  uint64 // decisions denied because Redis said the bucket is empty
	DeniedLocal   uint64 // decisions denied for want of allowance, without waiting (longer)
	DeniedDebt    uint64 // of those, decisions on keys whose bucket Redis last said is in debt (Charge)

	// Decisions of the failure policy, and the cost FallbackLocal admitted
	// or Charge charged beyond the allowance that Redis has not taken yet
	// (each key's next message has it taken).
	FailOpen, FailClosed, FallbackAllowed, FallbackDenied uint64
	Owed                                                  int64

	// The breakers: whether one is open, their switches, the time they
	// were open in all (the failure policy deciding for some keys), each.
	BreakerOpen                 bool
	BreakerOpens, BreakerCloses uint64
	BreakerOpenFor              time.Duration
	Nodes                       []NodeStats

	Evictions uint64 // idle keys dropped from memory
	// Keys split or merged by this instance (WithAutoSplit), keys moved to
	// a new layout (its own reshards and others'), tracked keys split now.
	Reshards, Moves uint64
	SplitKeys       int64

	// Cost admitted from allowance since New, refunds and charges
	// included; cost given back by Refund; cost charged by Charge;
	// allowance granted and dropped unspent, under a lowered burst or let
	// go by a key idle past the idle hold whose bucket had refilled; and
	// the allowance held unspent now.
	Admitted, Refunded, Charged, Dropped uint64
	Outstanding                          int64
	// Debt is how far the buckets of the keys tracked here are short of
	// empty, in tokens, by Redis's last word on each and the refill since:
	// charges it has taken beyond what they held (and, in Optimistic mode,
	// admissions overdrawn), to be repaid by refill before they admit
	// again. Instances sharing a key each count its debt.
	Debt int64

	SinceSync time.Duration // since Redis last answered a round (0 before the first); grows on an instance with nothing to sync
	// Unanswered is how long Redis has left unanswered the rounds that
	// needed it: since the first round after the last answered one, while
	// no round since has had an answer; 0 while Redis answers, and on an
	// instance with nothing to sync, however long it has been idle.
	Unanswered time.Duration
	LastRound  time.Duration // how long the last background round took

	// Every round that sent a message (the loop's, fetches, Close's): its
	// wall-clock seconds (buckets 0.5ms to 2.5s) and its messages (powers
	// of 4 up to 65536).
	RoundDuration, RoundMessages hybridlimit.Histogram
	// Failed Redis calls (sync scripts, presence, probes) by class: the
	// classes of hybridlimit.RedisErrorClasses.
	Errors [hybridlimit.NumErrorClasses]uint64
}

// NodeStats is one Redis master's breaker: the node's address ("redis" for
// a client without one), whether it is open, how long open in all.
type NodeStats struct {
	Addr        string
	BreakerOpen bool
	OpenFor     time.Duration
}

// answered notes how Redis answered round r, applied at now (ns since
// the limiter's base): a round with a message answered is Redis answering;
// a round with none answered starts the unanswered time, unless one
// before it did; a round with no message says nothing.
func (c *counters) answered(r *round, now int64) {
	for i := range r.msgs {
		if r.msgs[i].ok {
			c.lastSuccess.Store(now + 1)
			c.unanswered.Store(0)
			return
		}
	}
	if len(r.msgs) > 0 {
		c.unanswered.CompareAndSwap(0, r.l.nanos(r.at)+1)
	}
}

// Stats returns a snapshot of the counters.
func (l *Limiter) Stats() Stats {
	c := &l.stats
	now := l.cfg.clock.Now()
	admitted, outstanding, split, debt := l.tally(l.nanos(now))
	var since time.Duration
	if last := c.lastSuccess.Load(); last != 0 {
		since = time.Duration(l.nanos(now) - (last - 1))
	}
	var unanswered time.Duration
	if first := c.unanswered.Load(); first != 0 {
		unanswered = max(time.Duration(l.nanos(now)-(first-1)), 0)
	}
	var errs [hybridlimit.NumErrorClasses]uint64
	for i := range errs {
		errs[i] = c.errors[i].Load()
	}
	nodes, openFor, anyOpen := l.nodeStats(now)
	return Stats{
		RoundDuration:   c.roundDuration.Snapshot(&roundDuration),
		RoundMessages:   c.roundMessages.Snapshot(&roundMessages),
		Errors:          errs,
		Admitted:        admitted,
		Refunded:        c.refunded.Load(),
		Charged:         c.charged.Load(),
		Dropped:         c.dropped.Load(),
		Outstanding:     outstanding,
		Debt:            debt,
		SinceSync:       since,
		Unanswered:      unanswered,
		BreakerOpenFor:  openFor,
		Keys:            l.tracked.Load(),
		LiveInstances:   l.live.Load(),
		Rounds:          c.rounds.Load(),
		RoundErrors:     c.roundErrors.Load(),
		Fetches:         c.fetches.Load(),
		Messages:        c.messages.Load(),
		ScriptCalls:     c.scriptCalls.Load(),
		Elsewhere:       c.elsewhere.Load(),
		Waits:           c.waits.Load(),
		DeniedRemote:    uint64(c.deniedRemote.Value()),
		DeniedLocal:     uint64(c.deniedLocal.Value()),
		DeniedDebt:      uint64(c.deniedDebt.Value()),
		FailOpen:        c.failOpen.Load(),
		FailClosed:      c.failClosed.Load(),
		FallbackAllowed: c.fallbackAllowed.Load(),
		FallbackDenied:  c.fallbackDenied.Load(),
		Owed:            l.owing.total(),
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

// tally walks the entries for what they admitted in all (with what left
// them), hold unspent, how many are split keys' homes, and how far their
// buckets are in debt at now (ns of the limiter's clock).
func (l *Limiter) tally(now int64) (admitted uint64, outstanding, split, debt int64) {
	c := &l.stats
	l.retiring.RLock()
	sum := int64(c.evictedAdmitted.Load() + c.refunded.Load())
	l.each(func(e *entry) {
		l.lockGather(e)
		held, consumed := e.ledger.Snapshot(&e.avail)
		l.scatterUnlock(e)
		sum += consumed
		outstanding += held
		if !e.whole() && e.key == e.owner {
			split++
		}
		debt += e.debt(now)
	})
	l.retiring.RUnlock()
	// Tokens dropped leave an entry's allowance for its consumption and
	// join the dropped count under its lock: read after the walk, that
	// count holds every drop the walk saw, and a drop the walk missed
	// reads low, never high. A refund moves cost out of an entry and into
	// the refunded count in one step the walk may see half done. Admitted,
	// a counter, is kept from going down meanwhile.
	sum -= int64(c.dropped.Load())
	return c.admitted.raise(uint64(max(sum, 0))), outstanding, split, debt
}

// nodeStats returns each node's breaker state, the time any breaker has
// been open in all, and whether one is open now.
func (l *Limiter) nodeStats(now time.Time) (nodes []NodeStats, openFor time.Duration, anyOpen bool) {
	openFor = time.Duration(l.nodes.openTotal.Load())
	for _, n := range l.nodes.all() {
		ns := NodeStats{Addr: n.addr, BreakerOpen: n.breaker.isOpen(), OpenFor: n.breaker.openFor(now)}
		openFor += ns.OpenFor
		anyOpen = anyOpen || ns.BreakerOpen
		nodes = append(nodes, ns)
	}
	return nodes, openFor, anyOpen
}
