package ruleset

import (
	"context"
	"time"
)

// This file is the one decision loop of the module's front ends: the
// rule engine (Engine.Check, for httplimit and grpclimit) and the Envoy
// service (package rls) each turn a request into applications, a limit
// the request meets, and ask them through Decide, which settles what
// stops the evaluation, the verdict and the give-back. What a front end
// adds is how it reads the request and what its limiter's answer means
// (the ask function); the differences between them are DecideOptions.

// After is what Decide does with the applications after one that decides
// the request has denied it.
type After int

const (
	// AfterStop asks no later application: a rejected request costs them
	// nothing, and the front end's work for them (matching, finding a
	// key) is not done. The rule engine's.
	AfterStop After = iota
	// AfterPeek asks every later application without spending (its ask
	// gets spend false), so that its state can be reported. The Envoy
	// service's, which answers a status for every descriptor.
	AfterPeek
)

// Answer is what asking one application came to.
type Answer struct {
	// Spent is what the application's limiter took for the request, Cost
	// 0 for nothing: given back if the request is rejected.
	Spent Spend
	// Denied: the application's limit refuses the request.
	Denied bool
	// Quota: a denial rejects the request only if every quota application
	// of it denies too. Otherwise a denial rejects the request on its own.
	Quota bool
	// Shadow: a denial is reported, and rejects nothing.
	Shadow bool
	// Halt ends the evaluation and rejects the request, whatever the
	// others say: an outage answered as one under FailClosed.
	Halt bool
}

// decides reports whether the answer's denial rejects the request on its
// own.
func (a Answer) decides() bool { return a.Denied && !a.Shadow && !a.Quota }

// DecideOptions are a front end's settings of Decide.
type DecideOptions struct {
	// After says what follows a denial by an application that decides
	// the request (neither Quota nor Shadow).
	After After
	// CountAll has every application asked and spend (After does not
	// apply) and nothing given back; the verdict is reported. The Envoy
	// service's SHADOW_MODE, which then lets the request through, and its
	// count of every hit (HYBRIDLIMIT_COUNT_EVERY_HIT).
	CountAll bool
	// GiveBackOnError gives back what was spent when ask fails, as for a
	// rejection. Without it, a failed decision keeps what it spent.
	GiveBackOnError bool
}

// Decide asks n applications in order through ask, the front end's
// reading of application i: ask spends the application's cost only when
// spend is set, and says what the limiter answered. After a denial that
// decides the request, opts.After says what the later applications get.
// It reports the verdict: rejected when an application that decides the
// request (neither Quota nor Shadow) denied it, one halted, or every quota
// application (at least one) denied it. A rejected request gets back what
// it spent, through GiveBack, unless opts.CountAll; done, when not nil, is
// told each give-back's application index and error.
//
// A quota application that is also Shadow counts among the quota ones
// but never as a denial of them: quota applications in shadow keep a
// request's quota ones from rejecting it.
//
// Decide returns ask's first error, and then asks no more applications.
func Decide(ctx context.Context, n int, opts DecideOptions, ask func(i int, spend bool) (Answer, error), done func(i int, err error)) (rejected bool, err error) {
	var (
		held                [8]Spend
		spends              = held[:0]
		heldAt              [8]int
		at                  = heldAt[:0] // spends[j] is application at[j]'s
		stopped             bool
		quota, quotaDenials int
	)
	for i := 0; i < n; i++ {
		if stopped && opts.After == AfterStop {
			break
		}
		a, err := ask(i, opts.CountAll || !stopped)
		if err != nil {
			if opts.GiveBackOnError {
				giveBack(ctx, spends, at, done)
			}
			return false, err
		}
		if a.Spent.Cost > 0 {
			spends, at = append(spends, a.Spent), append(at, i)
		}
		if a.Quota {
			quota++
			if a.Denied && !a.Shadow {
				quotaDenials++
			}
		}
		if a.Halt {
			rejected = true
			break
		}
		if a.decides() {
			rejected = true
			stopped = !opts.CountAll
		}
	}
	if quota > 0 && quota == quotaDenials {
		rejected = true
	}
	if rejected && !opts.CountAll {
		giveBack(ctx, spends, at, done)
	}
	return rejected, nil
}

// refundTimeout bounds a give-back made after the request's context ended.
const refundTimeout = time.Second

// afterwards returns ctx for a give-back or a settlement made once the
// request is over, and its cancel: once ctx has ended, a context of its
// own bounded by refundTimeout, since what the request spent or used is
// owed whether or not the client stayed.
func afterwards(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
}

// giveBack gives spends back, spends[j] being application index[j]'s, on
// a context that outlives the request's (afterwards).
func giveBack(ctx context.Context, spends []Spend, index []int, done func(i int, err error)) {
	if len(spends) == 0 {
		return
	}
	ctx, cancel := afterwards(ctx)
	defer cancel()
	GiveBack(ctx, spends, func(j int, err error) {
		if done != nil {
			done(index[j], err)
		}
	})
}
