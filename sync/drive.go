package sync

import (
	"context"
	"errors"
	"time"
)

// A Limiter whose Clock is also a Driver hands the driver its Loop at New
// and starts no goroutine of its own: whoever owns time (the simulator,
// in virtual time) calls Step at each of the loop's ticks, and at once
// when Woken says a decision asked for a round, and sends and finishes
// each round when its time comes. A decision out of allowance waits in
// Await for a round that carries its key, which the driver steps once the
// loop's Linger has passed since the first such decision, as Start's loop
// does when a decision asks it for a fetch. Start's loop runs the same
// Step from a ticker, with each round sent and finished at once.

// ErrExpired is what a Driver's Await returns when the decision's deadline
// passed before a round that carried its key finished.
var ErrExpired = errors.New("sync: deadline passed before the round")

// Driver is a Clock that drives the loops of the limiters made with it.
type Driver interface {
	Clock
	// Drive takes the loop of a limiter made with the clock.
	Drive(Loop)
	// Await blocks a decision of l's limiter whose key waits to be
	// fetched until a Step begun after it finishes, and returns the error
	// of that round's calls; or until deadline, on the driver's clock, and
	// returns ErrExpired. The decision runs in a goroutine of the
	// driver's, which learns of the wait this way.
	Await(l Loop, deadline time.Time) error
}

// Loop is one limiter's background work, as a Driver steps it.
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
	// count, as a Step does once an interval: a driver fixes the
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

// driven is a Limiter's loop as a Driver steps it.
type driven struct{ l *Limiter }

func (d driven) Tick() time.Duration { return d.l.pol.Tick() }

// Step does a tick's chores before its round (the loop does them after:
// in virtual time they take none). A fetch is the fetcher's round.
func (d driven) Step(ctx context.Context, why Why) Round {
	switch why {
	case StepTick:
		d.l.doChores(ctx, d.l.cfg.clock.Now())
	case StepFetch:
		return d.l.fetchRound()
	}
	return d.l.step(ctx)
}

func (d driven) Linger() time.Duration { return d.l.cfg.linger }

func (d driven) Woken() bool {
	select {
	case <-d.l.wake:
		return true
	default:
		return false
	}
}

func (d driven) Announce(ctx context.Context) error {
	d.l.chores.presence = d.l.cfg.clock.Now()
	return d.l.announce(ctx, true)
}
