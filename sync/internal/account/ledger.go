package account

import (
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// Ledger is one key's (or split key part's) account on this instance
// between the messages it sends: what it was issued, what Redis last
// acknowledged, the message in flight, the decisions waiting. It is plain
// data; its owner guards it with the key's lock and owns the counter
// decisions spend from (Counter), which the ledger fills and drains.
//
// Allowance is counted by two numbers: Issued, the tokens handed to the
// counter in all, and the counter itself, what is left of them. So the
// tokens this instance has admitted for the key in all are Issued less
// what the counter holds, with no count on the request path but the
// counter's.
type Ledger struct {
	Issued   int64 // allowance handed to the counter in all, and what is owed: the failure policy's admissions, charges (see Owing)
	Acked    int64 // the ledger's total in Redis, as last heard
	SentAt   int64 // when the message in flight was prepared, ns of the limiter's clock, as are the times below
	GrantAt  int64 // Optimistic: when the message that brought the allowance was prepared
	Waiting  int64 // cost of the decisions waiting for allowance
	Use      Usage // the demand estimate
	NextSync int64 // when the key is next reconciled
	InFlight bool  // a message awaits its reply
	Unacked  bool  // the last message got no reply: Redis may hold more than Acked says
}

// Counter is the allowance decisions spend from, lock-free: a decision
// subtracts its cost and puts it back if the result is negative. The
// ledger changes it only through these methods, which keep a cost being
// put back (a negative reading) out of its books.
type Counter interface {
	// Load returns what is left; below zero while a decision puts a cost
	// back.
	Load() int64
	// Held returns what is left once no cost is being put back, at least 0.
	Held() int64
	// Deposit adds n once no cost is being put back.
	Deposit(n int64)
	// Take removes up to n of what is left and returns how much it took.
	Take(n int64) int64
	// Swap replaces what is left, from, by to(from) in one step once no
	// cost is being put back, and reports both; ok is false for a counter
	// that takes no more (its key is gone).
	Swap(to func(from int64) int64) (from, set int64, ok bool)
}

// Consumed returns the tokens admitted in all.
func (l *Ledger) Consumed(c Counter) int64 { return l.Issued - max(c.Load(), 0) }

// Give adds n tokens to the allowance.
func (l *Ledger) Give(c Counter, n int64) {
	c.Deposit(n)
	l.Issued += n
}

// Withdraw removes up to n unspent tokens from the allowance and returns
// how many it removed. A negative n (a raw reading of a counter a cost is
// being put back to) removes nothing.
func (l *Ledger) Withdraw(c Counter, n int64) int64 {
	if n <= 0 {
		return 0
	}
	t := c.Take(n)
	l.Issued -= t
	return t
}

// Snapshot returns the unspent allowance and the consumption it implies,
// from one reading of the counter.
func (l *Ledger) Snapshot(c Counter) (held, consumed int64) {
	held = c.Held()
	return held, l.Issued - held
}

// SetAllowance sets the allowance to allowance(consumed), computed from
// the same reading of the counter that the swap replaces, so no decision
// slips between the reading and the new allowance.
func (l *Ledger) SetAllowance(c Counter, allowance func(consumed int64) int64) {
	from, to, ok := c.Swap(func(from int64) int64 { return max(allowance(l.Issued-from), 0) })
	if ok {
		l.Issued += to - from
	}
}

// Look is what a round knows of a key beyond its ledger when it looks at
// it.
type Look struct {
	T       int64   // now, ns of the limiter's clock
	Holding Holding // the lease policy's view of the key
	Owed    int64   // what the failure policy admitted that Redis has not acknowledged
	Since   int64   // when the first of Owed was admitted
	Synced  bool    // Redis has answered for the key at least once
	Flagged bool    // a decision found it out of allowance and asked for a round
	Closed  bool    // the limiter is closed: nothing more is admitted
}

// Mode is what Reserve and Optimistic do differently: what a message
// says, and what its reply does. Everything else about a round is common.
type Mode interface {
	// Wire names the mode to sync.lua.
	Wire() scripts.SyncMode
	// Lapse drops, before a round looks at the key at t, allowance about
	// to lapse in Redis.
	Lapse(l *Ledger, c Counter, t int64)
	// Compose fills in m's Value, Held and Budget and reports whether the
	// key has anything to say, and the tokens granted it let go, spent by
	// no one (Reserve's, Policy.LetsGo); final hands everything back.
	Compose(l *Ledger, c Counter, k Look, m *scripts.SyncMsg, final bool) (says bool, let int64)
	// Apply folds the mode's part of reply r to message m into the ledger
	// and returns the tokens of the bucket the key may count on. Of k it
	// reads T, Owed and Closed.
	Apply(l *Ledger, c Counter, k Look, m scripts.SyncMsg, r scripts.SyncReply) (left int64)
	// Starved reports whether a reply that found tokens in the bucket
	// leaves the key nothing to spend before its next round.
	Starved(r scripts.SyncReply) bool
	// Idle reports whether a key unused long enough can go with nothing
	// lost, dropping allowance Redis does not count. The caller has
	// checked that nothing is in flight or due.
	Idle(l *Ledger, c Counter) bool
	// Short returns the tokens the bucket must hold, by Redis's last word
	// on it, for the key to pay cost.
	Short(l *Ledger, c Counter, cost int64) int64
	// Fetches reports whether a decision that finds no allowance asks
	// Redis for more, rather than wait for the next round.
	Fetches(synced bool) bool
	// Charge spends cost whatever the key holds and returns what of it
	// the key owes Redis (see Owing), counted in Issued, that the
	// next message has Redis take from the bucket whatever it holds.
	Charge(l *Ledger, c Counter, cost int64) (owed int64)
}

// Compose computes the key's next message under limit, its part's: what
// is common to both modes (the limit, the total last heard, what is owed),
// then the mode's part; it reports whether there is anything to say, and
// the tokens granted it let go (Mode.Compose). The caller has measured the
// key's demand into Use.
func (l *Ledger) Compose(mode Mode, c Counter, k Look, limit hybridlimit.Limit, final bool) (scripts.SyncMsg, bool, int64) {
	m := scripts.SyncMsg{
		Rate: limit.Rate, PeriodUS: limit.Period.Microseconds(), Burst: limit.Burst,
		Base: l.Acked, Budget: -1,
	}
	// What the failure policy admitted Redis takes whatever the bucket
	// holds, as of when it was admitted; in Reserve mode on top of every
	// grant this instance heard of (restated, should a failover have lost
	// it).
	if k.Owed > 0 {
		m.Owed, m.AgeUS = k.Owed, time.Duration(k.T-k.Since).Microseconds()
	}
	says, let := mode.Compose(l, c, k, &m, final)
	return m, says, let
}

// Sending marks a message prepared at t in flight.
func (l *Ledger) Sending(t int64) {
	l.InFlight, l.SentAt = true, t
}

// Answered records whether the message in flight got its reply (ok).
func (l *Ledger) Answered(ok bool) {
	l.InFlight, l.Unacked = false, !ok
}

// Apply folds reply r to message m into the ledger and returns the
// tokens of the bucket the key may count on. The caller has taken what r
// acknowledges of what is owed out of k.Owed.
func (l *Ledger) Apply(mode Mode, c Counter, k Look, m scripts.SyncMsg, r scripts.SyncReply) (left int64) {
	l.Acked = r.Total
	return mode.Apply(l, c, k, m, r)
}
