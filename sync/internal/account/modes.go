package account

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

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
// granted, has anything to tell Redis: a new total, owed tokens, a repeat of a
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

// Optimistic is the Optimistic mode: an instance spends first and
// reports. A message states the tokens admitted in all; Redis debits what
// is new (overdrawing the bucket if need be, paid back by later denials)
// and replies with the allowance the instance may spend until its next
// message: all the bucket holds, or under an overshoot budget a share
// that, over all instances, never exceeds what the bucket holds plus the
// budget.
type Optimistic struct {
	Policy Policy
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

// Reserve is the Reserve mode: an instance takes allowance from the
// global bucket before it spends it. A message states the tokens granted
// in all that the instance wants; Redis grants the difference as far as
// the bucket holds, or takes back what is handed back.
type Reserve struct{ Policy Policy }

// Wire names the mode to sync.lua.
func (Reserve) Wire() scripts.SyncMode { return scripts.ModeReserve }

// Lapse: a grant never lapses.
func (Reserve) Lapse(*Ledger, Counter, int64) {}

// Compose asks for what the lease policy wants the key to hold, or hands
// back what it holds beyond that. What it hands back it takes from the
// counter first, so that no reply, lost or late, can let this instance
// spend it.
//
// A key idle past the idle hold whose bucket is full again lets what it
// holds go instead (Policy.LetsGo): it stays granted, and the key has
// nothing to say.
//
// The base it states is what the key holds grants for, before this
// message: the total last heard, or less after a hand-back that got no
// reply. Redis may have applied that hand-back and granted the tokens to
// another instance; raised to the total last heard, the ledger would take
// them again, into debt, and the reply would grant them to this instance
// twice.
func (r Reserve) Compose(l *Ledger, c Counter, k Look, m *scripts.SyncMsg, final bool) (says bool, let int64) {
	m.Base = min(m.Base, l.Issued-m.Owed)
	excess, more := r.Policy.ReserveAsk(k.Holding, l.Waiting, final)
	n := l.Withdraw(c, excess)
	if !final && r.Policy.LetsGo(k.Holding) {
		l.Issued += n // spent by no one, granted all the same
		let = n
	}
	m.Value = l.Issued + more
	return more > 0 || ReserveSays(m.Value, l.Acked, m.Owed, l.Unacked, k.Synced, l.Waiting), let
}

// Apply gives the key what Redis granted beyond what it had heard of.
func (Reserve) Apply(l *Ledger, c Counter, k Look, _ scripts.SyncMsg, r scripts.SyncReply) int64 {
	if n := ReserveGrant(r.Total, l.Issued, k.Owed); n > 0 {
		l.Give(c, n)
	}
	return r.Remaining
}

// Starved: what a reply grants is the key's.
func (Reserve) Starved(scripts.SyncReply) bool { return false }

// Idle: nothing held, everything handed back acknowledged.
func (Reserve) Idle(l *Ledger, c Counter) bool { return c.Load() == 0 && l.Issued == l.Acked }

// Short: cost less the allowance held, which Redis granted already.
func (Reserve) Short(_ *Ledger, c Counter, cost int64) int64 { return cost - max(c.Load(), 0) }

// Fetches: a key out of allowance asks for more at once.
func (Reserve) Fetches(bool) bool { return true }

// Charge: the allowance held pays first, since Redis took it from the
// bucket already; the rest is owed.
func (Reserve) Charge(l *Ledger, c Counter, cost int64) int64 {
	owed := cost - c.Take(cost)
	l.Issued += owed
	return owed
}

// Wire names the mode to sync.lua.
func (Optimistic) Wire() scripts.SyncMode { return scripts.ModeOptimistic }

// Lapse stops spending an allowance half-way to lapsing in Redis and not
// renewed, with half a life of margin for a late round.
func (o Optimistic) Lapse(l *Ledger, c Counter, t int64) {
	if o.Lapsing(t, l.GrantAt) {
		l.Withdraw(c, c.Load())
	}
}

// Compose reports what the key admitted, and what it holds unspent,
// which Redis never records less of (it may be spent before the reply).
func (o Optimistic) Compose(l *Ledger, c Counter, k Look, m *scripts.SyncMsg, final bool) (says bool, let int64) {
	m.Budget = o.BudgetOf(m.Burst)
	if final {
		l.SetAllowance(c, func(int64) int64 { return 0 })
		m.Held = -1 // closing: record no allowance
	} else if o.Budget >= 0 {
		// Under a budget, hand back what is beyond twice what the key keeps.
		keep := o.Policy.Keep(k.Holding, l.Waiting)
		if a := c.Load(); a > 2*keep {
			l.Withdraw(c, a-keep)
		}
	}
	held, consumed := l.Snapshot(c)
	if !final {
		m.Held = held
	}
	m.Value = consumed
	renewing := o.Renewing(held, k.T, l.GrantAt)
	return OptimisticSays(consumed, l.Acked, k.Synced, l.Unacked, final, renewing, k.Flagged), 0
}

// Apply sets the allowance to what the reply grants, less what the key
// admitted since the message: the allowance counts from the consumption
// the message carried (its Value). After Close nothing more is admitted, so nothing
// goes unreported. It returns what the bucket holds beyond the allowance.
func (o Optimistic) Apply(l *Ledger, c Counter, k Look, m scripts.SyncMsg, r scripts.SyncReply) int64 {
	// A reply that comes back half an allowance's life or more after its
	// message was prepared brings an allowance that Lapse would take back
	// at once, and that may have lapsed in Redis meanwhile and gone to
	// others: spend none of it. What the message reported stays counted,
	// and the next message asks afresh. (A client that ignores context
	// deadlines hands such replies over however long the round timeout.)
	stale := o.Lapsing(k.T, l.SentAt)
	l.SetAllowance(c, func(consumed int64) int64 {
		if k.Closed || stale {
			return 0
		}
		return Allowance(r.Allowance, consumed, m.Value)
	})
	l.GrantAt = l.SentAt
	return max(r.Remaining-r.Allowance, 0)
}

// Starved: tokens are left but other instances hold them all under the
// budget, and nothing comes free before they report.
func (o Optimistic) Starved(r scripts.SyncReply) bool { return o.Budget >= 0 && r.Allowance == 0 }

// Idle: everything admitted reported (below Acked only after a refund of
// what was reported); the allowance held is the instance's own, which
// Redis does not count, and goes.
func (Optimistic) Idle(l *Ledger, c Counter) bool {
	if l.Consumed(c) > l.Acked {
		return false
	}
	l.Withdraw(c, c.Load())
	return true
}

// Short: cost plus what the key admitted since its last report, which the
// bucket has yet to be debited; the next reply's allowance is what the
// bucket holds then, in place of what the key holds now.
func (Optimistic) Short(l *Ledger, c Counter, cost int64) int64 {
	return cost + max(l.Consumed(c)-l.Acked, 0)
}

// Fetches: once synced, a key out of allowance waits for the next round.
func (Optimistic) Fetches(synced bool) bool { return !synced }

// Charge: all of it is owed. Paid from the allowance, it would be
// consumption the bucket debits no deeper than admissions go, and
// allowances other instances hold at once overdraw the bucket past that
// and have the rest forgiven; what is owed Redis takes whole, into debt
// if need be, and never forgives (sync.lua).
func (Optimistic) Charge(l *Ledger, _ Counter, cost int64) int64 {
	l.Issued += cost
	return cost
}
