package httplimit

import (
	"errors"
	"net/http"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
)

// Outcome is what one rule made of one request.
type Outcome = ruleset.Outcome

// The outcomes, as RuleStats.Outcomes counts them; see ruleset.Outcome.
const (
	OutcomeAllowed      = ruleset.OutcomeAllowed      // admitted, and the request went on
	OutcomeDenied       = ruleset.OutcomeDenied       // an enforced rule denied
	OutcomeShadowDenied = ruleset.OutcomeShadowDenied // a shadow rule would have denied
	OutcomeExempt       = ruleset.OutcomeExempt       // Exempt let the request bypass the rule
	OutcomeNoKey        = ruleset.OutcomeNoKey        // the key function found no key (logged once per rule)
	OutcomeErrorOpen    = ruleset.OutcomeErrorOpen    // the limiter failed, the rule let the request through
	OutcomeErrorClosed  = ruleset.OutcomeErrorClosed  // the limiter failed, or its failure policy denied: 503
	OutcomeSkipped      = ruleset.OutcomeSkipped      // Match said no, or the cost was below 1
	OutcomeRefunded     = ruleset.OutcomeRefunded     // admitted, another rule rejected, the cost was given back
	OutcomeUnrefunded   = ruleset.OutcomeUnrefunded   // as refunded, but the limiter could not give it back
	NumOutcomes         = ruleset.NumOutcomes
)

// ErrorClass sorts the errors a Limiter returns, for metrics.
type ErrorClass = ruleset.ErrorClass

// The error classes, as RuleStats.Errors counts them.
const (
	ErrorUnavailable = ruleset.ErrorUnavailable // Redis could not answer (hybridlimit.ErrUnavailable)
	ErrorClosed      = ruleset.ErrorClosed      // the limiter was closed (sync.ErrClosed)
	ErrorInvalid     = ruleset.ErrorInvalid     // the limiter rejected the key, limit or cost
	ErrorCanceled    = ruleset.ErrorCanceled    // the request's context ended during the decision
	ErrorOther       = ruleset.ErrorOther
	NumErrorClasses  = ruleset.NumErrorClasses
)

// Classify returns the class of a limiter's error.
func Classify(err error) ErrorClass { return ruleset.Classify(err) }

// Policy is one rule's state as the response fields report it: Name,
// Quota and Window (RateLimit-Policy's q and w), Unit (qu), the limiter's
// Result and Next, the time until more quota is available (RateLimit's t).
type Policy = ruleset.Policy

var errNilRequest = errors.New("httplimit: nil request")

// Decision is the middleware's verdict on one request.
type Decision struct {
	// Status is http.StatusOK when the request may proceed,
	// http.StatusTooManyRequests when an enforced rule denied it, and
	// http.StatusServiceUnavailable when a FailClosed rule's limiter
	// failed, or an enforced rule's limiter denied by its own failure
	// policy (Result.Source hybridlimit.SourceFallback).
	Status int
	// RetryAfter is how long the client should wait: the denying rule's
	// wait; on a 503, the failed rule's FailRetry, or the limiter's wait
	// where that is longer. 0 when the request may proceed, and also on a
	// denial that no wait can lift (a cost above the rule's burst).
	RetryAfter time.Duration
	// Policies are the rules to report in the response fields, tightest
	// first: the tightest alone unless WithAllPolicies.
	Policies []Policy
	// Violated names the enforced rule that denied the request.
	Violated []string
}

// Allowed reports whether the request may proceed.
func (d *Decision) Allowed() bool { return d.Status == http.StatusOK }

// Check evaluates the rules for r and returns the verdict without writing
// anything. The Handler calls it; call it yourself to render the verdict
// another way (WriteHeaders writes the fields). It returns an error only
// when r's context ends during a decision, and the request should then
// not be served, or for a nil r.
//
// Rules are evaluated in the order given until one rejects the request:
// the first enforced rule that denies it (429), or whose limiter fails
// under FailClosed (503). A request costs a rule only if it is admitted:
// what the rules before a rejection spent is given back to their
// limiters, exactly, through the limiter's Refund (every limiter of this
// module has one; the cost of a rule whose limiter has none stays spent,
// counted as OutcomeUnrefunded). So a client that one rule denies does not
// use up another rule's quota: with per-ip 2000/s and per-key 500/s, a
// client sending 40,000 requests a second is admitted 500 a second. The
// rules after a rejection are not asked, which saves their round trips on
// the requests that are turned away; put the rule that denies most often,
// or costs least, first. Shadow rules are asked like enforced ones, and
// given back what they spent when the request is rejected, but never
// reject it.
//
// The tightest rule, reported first, is the denying rule if any, else the
// enforced rule with the least Remaining. Ties go to the earlier rule.
func (m *Middleware) Check(r *http.Request) (Decision, error) {
	if r == nil {
		return Decision{}, errNilRequest
	}
	d, err := m.eng.Check(r.Context(), r)
	if err != nil {
		return Decision{}, err
	}
	out := Decision{Status: http.StatusOK, RetryAfter: d.RetryAfter, Policies: d.Policies, Violated: d.Violated}
	switch d.Verdict {
	case ruleset.Limited:
		out.Status = http.StatusTooManyRequests
	case ruleset.Unavailable:
		out.Status = http.StatusServiceUnavailable
	}
	if len(out.Policies) > 1 && !m.flags.Load().reportAll {
		out.Policies = out.Policies[:1:1]
	}
	return out, nil
}
