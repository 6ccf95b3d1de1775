package sync

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/scripts"
	"github.com/hybridlimit/hybridlimit/sync/internal/account"
)

// reserve is the Reserve mode: an instance takes allowance from the
// global bucket before it spends it. A message states the tokens granted
// in all that the instance wants; Redis grants the difference as far as
// the bucket holds, or takes back what is handed back.
type reserve struct{ l *Limiter }

func (reserve) wire() scripts.SyncMode { return scripts.ModeReserve }

func (reserve) lapse(*entry, int64) {}

// compose asks for what the lease policy wants e to hold, or hands back
// what it holds beyond that. What it hands back it takes from the local
// counters first, so that no reply, lost or late, can let this instance
// spend it.
func (r reserve) compose(now time.Time, e *entry, m *message, final bool) bool {
	excess, more := r.l.pol.ReserveAsk(r.l.view(e, m.limit, now), e.waiting, final)
	e.withdraw(excess)
	m.wire.Value = e.issued + more
	return more > 0 || account.ReserveSays(m.wire.Value, e.acked, m.wire.Owed, e.unacked, e.synced.Load(), e.waiting)
}

// apply gives e what Redis granted it beyond what it had heard of.
func (r reserve) apply(_ time.Time, e *entry, m *message) int64 {
	if n := account.ReserveGrant(m.reply.Total, e.issued, r.l.debts.owed(e)); n > 0 {
		e.give(n)
	}
	return m.reply.Remaining
}

func (reserve) starved(*message) bool { return false }

// idle: nothing held, everything handed back acknowledged.
func (reserve) idle(e *entry) bool { return e.avail.Load() == 0 && e.issued == e.acked }

func (reserve) fetches(*entry) bool { return true }

// short: cost less the allowance held, which Redis granted already.
func (reserve) short(e *entry, cost int64) int64 { return cost - max(e.avail.Load(), 0) }
