package rules

import "fmt"

// Outcome is what one rule made of one request.
type Outcome int

const (
	// OutcomeAllowed: the rule's limiter admitted the request, which went
	// on.
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: an enforced rule's limiter denied the request.
	OutcomeDenied
	// OutcomeShadowDenied: a shadow rule's limiter denied; the request
	// went on as far as this rule is concerned.
	OutcomeShadowDenied
	// OutcomeExempt: the rule's Exempt function exempted the request.
	OutcomeExempt
	// OutcomeNoKey: the rule's key function found no key in the request
	// (no API key header, no authenticated user, no route pattern), so
	// the rule did not apply. The first such request of each rule is
	// logged: a rule that never finds a key limits nothing.
	OutcomeNoKey
	// OutcomeErrorOpen: the limiter failed and the rule let the request
	// through (its OnError FailOpen or FallbackLocal, or a shadow rule,
	// also when the limiter's own FailClosed policy denied).
	OutcomeErrorOpen
	// OutcomeErrorClosed: the limiter failed and the rule rejected the
	// request (FailClosed), or the limiter's own FailClosed policy denied
	// it (Result.FailedClosed). A fallback share's denial is
	// OutcomeDenied.
	OutcomeErrorClosed
	// OutcomeSkipped: the rule does not concern the request: its Match
	// said no, or the request's cost under it is below 1.
	OutcomeSkipped
	// OutcomeRefunded: the rule admitted the request, a later rule
	// rejected it, and the rule's cost was given back to its limiter.
	OutcomeRefunded
	// OutcomeUnrefunded: as OutcomeRefunded, but the cost stays spent:
	// the limiter has no Refund method, or the refund failed.
	OutcomeUnrefunded
	// OutcomeMisconfigured: the rule's key function found no key because
	// the front end was not set up to give it what it reads, not because
	// the request lacks it: for HTTP, a key built from the route pattern
	// in a middleware that neither sits inside a router nor wraps one. The
	// rule limits nothing; the first such request of each rule is logged
	// with the fix, and an alert fires on the count.
	OutcomeMisconfigured
	// NumOutcomes is the number of outcomes, for arrays indexed by them.
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{
	"allowed", "denied", "shadow_denied", "exempt", "no_key", "error_open", "error_closed",
	"skipped", "refunded", "unrefunded", "misconfigured",
}

// String returns the outcome's name as metrics label it, such as "shadow_denied".
func (o Outcome) String() string {
	if o >= 0 && o < NumOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}
