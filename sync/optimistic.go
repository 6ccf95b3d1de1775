package sync

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/scripts"
	"github.com/hybridlimit/hybridlimit/sync/internal/account"
)

// optimistic is the Optimistic mode: an instance spends first and
// reports. A message states the tokens admitted in all; Redis debits what
// is new (overdrawing the bucket if need be, paid back by later denials)
// and replies with the allowance the instance may spend until its next
// message: all the bucket holds, or under an overshoot budget a share
// that, over all instances, never exceeds what the bucket holds plus the
// budget.
type optimistic struct {
	l   *Limiter
	cfg account.Optimistic // WithOvershootBudget's budget, the allowance's life
}

func (optimistic) wire() scripts.SyncMode { return scripts.ModeOptimistic }

// lapse stops spending an allowance half-way to lapsing in Redis and not
// renewed, with half a life of margin for a late round.
func (o optimistic) lapse(e *entry, t int64) {
	if o.cfg.Lapsing(t, e.grantAt) {
		e.withdraw(e.avail.Load())
	}
}

// compose reports what e admitted, and what it holds unspent, which Redis
// never records less of (it may be spent before the reply).
func (o optimistic) compose(now time.Time, e *entry, m *message, final bool) bool {
	m.wire.Budget = o.cfg.BudgetOf(m.limit.Burst)
	if final {
		e.setAllowance(func(int64) int64 { return 0 })
		m.wire.Held = -1 // closing: record no allowance
	} else if o.cfg.Budget >= 0 {
		// Under a budget, hand back what is beyond twice what e keeps.
		keep := o.l.pol.Keep(o.l.view(e, m.limit, now), e.waiting)
		if a := e.avail.Load(); a > 2*keep {
			e.withdraw(a - keep)
		}
	}
	held, consumed := e.snapshot()
	if !final {
		m.wire.Held = held
	}
	m.wire.Value = consumed
	e.sent = consumed
	renewing := o.cfg.Renewing(held, o.l.nanos(now), e.grantAt)
	return account.OptimisticSays(consumed, e.acked, e.synced.Load(), e.unacked, final, renewing, e.flagged)
}

// apply sets e's allowance to what the reply grants, less what e
// admitted since the message: the allowance counts from the consumption
// the message carried. After Close nothing more is admitted, so nothing
// goes unreported. It returns what the bucket holds beyond the allowance.
func (o optimistic) apply(now time.Time, e *entry, m *message) int64 {
	closed := o.l.closed.Load()
	// A reply that comes back half an allowance's life or more after its
	// message was prepared brings an allowance that lapse would take back
	// at once, and that may have lapsed in Redis meanwhile and gone to
	// others: spend none of it. What the message reported stays counted,
	// and the next message asks afresh. (A client that ignores context
	// deadlines hands such replies over however long the round timeout.)
	stale := o.cfg.Lapsing(o.l.nanos(now), e.sentAt)
	allowance := m.reply.Allowance
	e.setAllowance(func(consumed int64) int64 {
		if closed || stale {
			return 0
		}
		return account.Allowance(allowance, consumed, e.sent)
	})
	e.grantAt = e.sentAt
	return max(m.reply.Remaining-allowance, 0)
}

// starved: tokens are left but other instances hold them all under the
// budget, and nothing comes free before they report.
func (o optimistic) starved(m *message) bool { return o.cfg.Starved(m.reply.Allowance) }

// idle: everything admitted reported (below acked only after a refund of
// what was reported); the allowance e holds is its own, which Redis does
// not count, and goes.
func (optimistic) idle(e *entry) bool {
	if e.consumed() > e.acked {
		return false
	}
	e.withdraw(e.avail.Load())
	return true
}

// fetches: once synced, a key out of allowance waits for the next round.
func (optimistic) fetches(e *entry) bool { return !e.synced.Load() }

// short: cost plus what e admitted since its last report, which the
// bucket has yet to be debited; the next reply's allowance is what the
// bucket holds then, in place of what e holds now.
func (optimistic) short(e *entry, cost int64) int64 { return cost + max(e.consumed()-e.acked, 0) }

// allowanceLife is how long an Optimistic allowance counts in Redis against
// the other instances' allowances. The instance renews it at a fifth of its
// life and stops spending it at half its life (lapse), so what it spent is
// reported before the allowance stops counting unless its reports fail for
// some five intervals; a crashed instance's allowance holds others back for
// at most this long.
func (l *Limiter) allowanceLife() time.Duration {
	return 10*l.cfg.interval + l.cfg.roundTimeout
}
