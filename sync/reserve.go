package sync

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/scripts"
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
	h := r.l.view(e, m.limit, now)
	h.held = max(h.held, 0)
	// Closing: hand everything back and ask for nothing, not even for
	// decisions that waited (they have given up or will get ErrClosed).
	var want int64
	if !final {
		want = r.l.pol.want(h, e.waiting)
	}
	excess, more := r.l.pol.topUp(h, e.waiting, want)
	e.take(excess)
	if more > 0 {
		m.wire.Value = e.issued + more
		return true
	}
	m.wire.Value = e.issued
	return m.wire.Value != e.acked || m.wire.Owed > 0 || e.unacked || !e.synced.Load() && e.waiting > 0
}

// settle gives e what Redis granted it beyond what it had heard of.
func (r reserve) settle(_ time.Time, e *entry, m *message) int64 {
	if granted := e.issued - r.l.debts.owed(e); m.reply.Total > granted {
		// Never less: a message raises a ledger that lost tokens (a
		// failover's lost writes, an expired ledger) to all it was told.
		e.give(m.reply.Total - granted)
	}
	return m.reply.Remaining
}

func (reserve) starved(*message) bool { return false }

// idle: nothing held, everything handed back acknowledged.
func (reserve) idle(e *entry) bool { return e.avail.Load() == 0 && e.issued == e.acked }

func (reserve) fetches(*entry) bool { return true }
