package sync

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// mode is what Reserve and Optimistic do differently: what a message
// says, and what its reply does. Everything else about a round is shared;
// reserve.go and optimistic.go hold the two.
type mode interface {
	// wire names the mode to sync.lua.
	wire() scripts.SyncMode
	// lapse drops, before a round looks at e at t (ns of the limiter's
	// clock), allowance about to lapse in Redis. The caller holds e.mu.
	lapse(e *entry, t int64)
	// compose fills in m's value, held and budget for e, and reports
	// whether e has anything to say; final hands everything back. The
	// caller holds e.mu and has measured e's demand.
	compose(now time.Time, e *entry, m *message, final bool) bool
	// apply folds the mode's part of m's reply into e and returns the
	// tokens of the bucket e may count on. The caller holds e.mu.
	apply(now time.Time, e *entry, m *message) (left int64)
	// starved reports whether a reply that found tokens in the bucket
	// leaves e nothing to spend before its next round.
	starved(m *message) bool
	// idle reports whether e, unused long enough, can be evicted with
	// nothing lost, dropping allowance Redis does not count. The caller
	// holds e.mu, and has checked that e has no message in flight or due.
	idle(e *entry) bool
	// short returns the tokens e's bucket must hold, by Redis's last word
	// on it, for e to pay cost. The caller holds e.mu.
	short(e *entry, cost int64) int64
	// fetches reports whether a decision that finds no allowance on e
	// asks Redis for more, rather than wait for the next round.
	fetches(e *entry) bool
}
