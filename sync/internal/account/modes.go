package account

import "time"

// The two modes' arithmetic. Reserve takes allowance from the global
// bucket before it spends it: a message states the tokens granted in all
// that the instance wants, and Redis grants the difference as far as the
// bucket holds, or takes back what is handed back. Optimistic spends
// first and reports: a message states the tokens admitted in all, and the
// reply brings the allowance the instance may spend until its next one.

// ReserveAsk decides what a Reserve key's next message asks for: the
// excess it hands back of what it holds, or more, up to what the lease
// policy wants it to hold with waiting tokens of decisions waiting for
// it. Closing (final), it wants nothing, not even for decisions that
// waited (they have given up or will be told the limiter closed).
func (p Policy) ReserveAsk(h Holding, waiting int64, final bool) (excess, more int64) {
	h.Held = max(h.Held, 0)
	var want int64
	if !final {
		want = p.Want(h, waiting)
	}
	return p.TopUp(h, waiting, want)
}

// ReserveSays reports whether a Reserve message stating value, the total
// granted, has anything to tell Redis: a new total, a debt, a repeat of a
// message that got no reply, or a first ask that decisions wait for.
func ReserveSays(value, acked, owed int64, unacked, synced bool, waiting int64) bool {
	return value != acked || owed > 0 || unacked || !synced && waiting > 0
}

// ReserveGrant returns the tokens a Reserve reply stating total, the
// ledger's total granted, adds to the allowance of a key issued tokens in
// all, owed of them admitted by the failure policy: what Redis granted
// beyond what the key had heard of. Never less: a message raises a ledger
// that lost tokens (a failover's lost writes, an expired ledger) to all it
// was told.
func ReserveGrant(total, issued, owed int64) int64 {
	return max(total-(issued-owed), 0)
}

// Optimistic is the Optimistic mode's configuration.
type Optimistic struct {
	Budget float64       // the overshoot budget, a fraction of a burst; -1 for none
	Life   time.Duration // how long an allowance counts in Redis against the others'
}

// BudgetOf returns the overshoot budget a message states for a part of
// burst tokens, or -1 for none.
func (o Optimistic) BudgetOf(burst int64) int64 {
	if o.Budget < 0 {
		return -1
	}
	return int64(o.Budget * float64(burst))
}

// Lapsing reports whether an allowance granted by a message prepared at
// since is half-way to lapsing in Redis at t (ns of the limiter's clock):
// the instance spends none of it from then on, with half a life of margin
// for a late round. Without a budget an allowance never lapses.
func (o Optimistic) Lapsing(t, since int64) bool {
	return o.Budget >= 0 && time.Duration(t-since) >= o.Life/2
}

// Renewing reports whether a key holding held tokens of an allowance
// granted at grantAt asks at t to renew it, a fifth of its life on.
func (o Optimistic) Renewing(held, t, grantAt int64) bool {
	return o.Budget >= 0 && held > 0 && time.Duration(t-grantAt) >= o.Life/5
}

// Keep returns the most a key keeps of an allowance, twice it at most
// before it hands the rest back: its lease and what waits, at least the
// minimum lease (which a quiet or low-limit key spends from next rather
// than be denied), and a token. More, and one instance keeps the pool it
// was granted alone and starves those that come later.
func (p Policy) Keep(h Holding, waiting int64) int64 {
	return max(waiting+p.Lease(h), p.MinLease(h.Limit, h.Live), 1)
}

// OptimisticSays reports whether an Optimistic message reporting consumed
// tokens admitted in all has anything to tell Redis: a first report, a
// repeat of one that got no reply, new consumption, the final report, an
// allowance to renew, or a key a decision found out of allowance (flagged)
// asking for more.
func OptimisticSays(consumed, acked int64, synced, unacked, final, renewing, flagged bool) bool {
	return !synced || unacked || consumed != acked || final || renewing || flagged
}

// Allowance returns what a key may spend after a reply that granted
// granted tokens to a message that carried sent tokens admitted in all,
// consumed having been admitted by now: the allowance counts from the
// consumption the message carried.
func Allowance(granted, consumed, sent int64) int64 {
	return granted - (consumed - sent)
}

// Starved reports whether a reply that found tokens in the bucket leaves
// the key no allowance: other instances hold them all under the budget,
// and nothing comes free before they report.
func (o Optimistic) Starved(allowance int64) bool { return o.Budget >= 0 && allowance == 0 }

// EmptyUntil returns until when (ns of the limiter's clock) a key denies
// locally after Redis said at now that its bucket is empty for retry ns:
// until a token is due, or, for a limit that is leased out (not a low
// limit), until the key's next round at nextSync asks for what refilled
// meanwhile, since every instance polling an empty bucket would cost a
// fetch per token. A part of a layout a reshard made (moved) is empty
// from its opening until the mover credits it what the old parts held,
// and the old parts' markers send instances to it meanwhile: an "empty"
// heard then may be stale, so it holds for an interval at most (with a
// slow refill it would otherwise strand the credit for as long as a token
// takes).
func EmptyUntil(now, retry, nextSync int64, leased, moved bool, interval time.Duration) int64 {
	until := now + retry
	if leased {
		until = max(until, nextSync)
	}
	if moved {
		until = min(until, max(nextSync, now+int64(interval)))
	}
	return until
}
