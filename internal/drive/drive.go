// Package drive lets whoever owns time run the loops of hybrid limiters
// (package sync) in step with a virtual clock, as the simulator does. A
// limiter whose Clock (sync.WithClock) is a Driver hands it its Loop at
// New and starts no goroutine of its own: the driver calls Step at each
// of the loop's ticks, and at once when Woken says a decision asked for a
// round, and sends and finishes each round when its virtual time comes.
// Production's loop runs the same Step from a ticker, with each round sent
// and finished at once.
package drive

import (
	"context"
	"time"
)

// Driver is a clock that drives the loops of the limiters made with it.
type Driver interface {
	Drive(Loop)
}

// Loop is one limiter's background work.
type Loop interface {
	// Tick is how often the loop steps.
	Tick() time.Duration
	// Step does the work due at the limiter's clock's time (presence,
	// automatic sharding, probes of failing nodes) and begins the round
	// of the entries due or flagged. Rounds must not overlap: finish one
	// before the next Step.
	Step(ctx context.Context) Round
	// Woken reports whether a decision asked for an early round since
	// the last call, and forgets the request.
	Woken() bool
	// Announce records the instance as alive now and reads the live
	// count, as a Step does once an interval: a driver settles the
	// instances' count this way before its run.
	Announce(ctx context.Context) error
}

// Round is one reconcile round of a Loop.
type Round interface {
	// Messages is the number of keys the round carries; a round of none
	// has nothing to send, and is finished at once.
	Messages() int
	// Send sends the round's calls (the scripts run in Redis then).
	Send(ctx context.Context) error
	// Finish applies the replies at the limiter's clock's time.
	Finish()
}
