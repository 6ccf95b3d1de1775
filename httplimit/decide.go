package httplimit

import (
	"errors"
	"net/http"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
	"github.com/hybridlimit/hybridlimit/internal/usage"
	"github.com/hybridlimit/hybridlimit/rules"
)

var errNilRequest = errors.New("httplimit: nil request")

// Decision is the middleware's verdict on one request.
type Decision struct {
	// Status is http.StatusOK when the request may proceed,
	// http.StatusTooManyRequests when an enforced rule denied it (its
	// limiter's fallback share included, Redis being out of reach), and
	// http.StatusServiceUnavailable when a FailClosed rule's limiter
	// failed, or an enforced rule's limiter denied by its own FailClosed
	// policy (Result.FailedClosed).
	Status int
	// RetryAfter is how long the client should wait: the denying rule's
	// wait (for a fallback share's denial that names none, the rule's
	// FailRetry); on a 503, the failed rule's FailRetry, or the limiter's
	// wait where that is longer. 0 when the request may proceed, and also
	// on a denial that no wait can lift (a cost above the rule's burst).
	RetryAfter time.Duration
	// Policies are the rules to report in the response fields, tightest
	// first: the tightest alone unless WithAllPolicies.
	Policies []rules.Policy
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
// Rules are evaluated in the order given until one rejects the request
// (429, or 503 for a FailClosed rule's failed limiter); what the rules
// before it spent is given back (see package rules).
func (m *Middleware) Check(r *http.Request) (Decision, error) {
	if r == nil {
		return Decision{}, errNilRequest
	}
	d, _, err := m.check(r, missingRoute)
	return d, err
}

// check is Check with the probe asked about the rules that find no key. It
// also returns what the rules that settle their cost spent, for the
// Handler to settle.
func (m *Middleware) check(r *http.Request, probe ruleset.Probe[*http.Request]) (Decision, *usage.Tab, error) {
	d, err := m.eng.Check(r.Context(), r, ruleset.Options[*http.Request]{Probe: probe, AllPolicies: m.flags.Load().reportAll})
	if err != nil {
		return Decision{}, nil, err
	}
	out := Decision{Status: http.StatusOK, RetryAfter: d.RetryAfter, Policies: d.Policies, Violated: d.Violated}
	switch d.Verdict {
	case ruleset.Limited:
		out.Status = http.StatusTooManyRequests
	case ruleset.Unavailable:
		out.Status = http.StatusServiceUnavailable
	}
	return out, d.Tab, nil
}
