// Package drive lets whoever owns time run the loops of hybrid limiters
// (package sync) in step with a virtual clock, as the simulator does. A
// limiter whose Clock (sync.WithClock) is a Driver hands it its Loop at
// New and starts no goroutine of its own: the driver calls Step at each of
// the loop's ticks, and at once when Woken says a decision asked for a
// round, and sends and finishes each round when its virtual time comes. A
// decision out of allowance waits in Await for a round that carries its
// key, which the driver steps once the loop's Linger has passed since the
// first such decision, as production's loop does when a decision asks it
// for a fetch. Production's loop runs the same Step from a ticker, with
// each round sent and finished at once.
package drive

import (
	"context"
	"errors"
	"time"
)

// ErrExpired is what Await returns when the decision's deadline passed
// before a round that carried its key finished.
var ErrExpired = errors.New("drive: deadline passed")

// Driver is a clock that drives the loops of the limiters made with it.
type Driver interface {
	Drive(Loop)
	// Await blocks a decision of l's limiter whose key waits to be
	// fetched until a Step begun after it finishes, and returns the error
	// of that round's calls; or until deadline, on the driver's clock, and
	// returns ErrExpired. The decision runs in a goroutine of the
	// driver's, which learns of the wait this way.
	Await(l Loop, deadline time.Time) error
}

// Loop is one limiter's background work.
type Loop interface {
	// Tick is how often the loop steps.
	Tick() time.Duration
	// Step does the work due at the limiter's clock's time (probes of
	// failing nodes; at a tick, presence and automatic sharding once an
	// interval) and begins the round of the entries due or flagged.
	// Rounds must not overlap: finish one before the next Step.
	Step(ctx context.Context, why Why) Round
	// Linger is how long the loop waits, from the first decision that
	// asks for a fetch (Await), for others to ask too before it steps; a
	// tick meanwhile steps at once.
	Linger() time.Duration
	// Woken reports whether a decision asked for an early round since
	// the last call, and forgets the request.
	Woken() bool
	// Announce records the instance as alive now and reads the live
	// count, as a Step does once an interval: a driver settles the
	// instances' count this way before its run.
	Announce(ctx context.Context) error
}

// Why is what a Loop steps for.
type Why int

// The reasons for a step.
const (
	// StepTick is the loop's tick, which also does the work of once an
	// interval.
	StepTick Why = iota
	// StepWake: a decision denied for want of allowance asked for a round.
	StepWake
	// StepFetch: decisions wait for the round (Await).
	StepFetch
)

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
