package ruleset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// FailurePolicy says what a rule does when its Limiter returns an error
// instead of a decision: Redis unreachable for an exact limiter, a closed
// hybrid limiter, an invalid key or limit.
//
// The hybrid limiter of package sync has failure policies of its own for
// Redis outages (fall back to a local share of the limit, by default) and
// answers with decisions rather than errors, so for it this policy only
// covers what that one cannot decide. Its policy's denials (Result.Source
// hybridlimit.SourceFallback) reject the request as unavailable, like
// FailClosed, whatever this policy says: the quota could not be checked,
// and that policy chose to deny.
type FailurePolicy int

const (
	// FailOpen (the default) lets the request through as far as this rule
	// is concerned. The rule is left out of the reported policies, since
	// nothing is known of its quota, and the failure is counted and logged.
	FailOpen FailurePolicy = iota
	// FailClosed rejects the request as unavailable (HTTP 503, gRPC
	// Unavailable), not as limited: the client has not exceeded any
	// quota, the server could not check it.
	FailClosed
)

func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

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
	// through (FailOpen, or a shadow rule, also when the limiter's own
	// failure policy denied).
	OutcomeErrorOpen
	// OutcomeErrorClosed: the limiter failed and the rule rejected the
	// request (FailClosed), or the limiter's own failure policy denied
	// it (Result.Source is hybridlimit.SourceFallback).
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
	// NumOutcomes is the number of outcomes, for arrays indexed by them.
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{
	"allowed", "denied", "shadow_denied", "exempt", "no_key", "error_open", "error_closed",
	"skipped", "refunded", "unrefunded",
}

// String returns the outcome's name as metrics label it, such as "shadow_denied".
func (o Outcome) String() string {
	if o >= 0 && o < NumOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// ErrorClass sorts the errors a Limiter returns, for metrics.
type ErrorClass int

const (
	// ErrorUnavailable: Redis could not answer (hybridlimit.ErrUnavailable).
	ErrorUnavailable ErrorClass = iota
	// ErrorClosed: the limiter was closed (sync.ErrClosed).
	ErrorClosed
	// ErrorInvalid: the limiter rejected the key, limit or cost.
	ErrorInvalid
	// ErrorCanceled: the request's context ended during the decision.
	ErrorCanceled
	// ErrorOther: anything else.
	ErrorOther
	// NumErrorClasses is the number of classes.
	NumErrorClasses
)

var errorClassNames = [NumErrorClasses]string{"unavailable", "closed", "invalid", "canceled", "other"}

// String returns the class's name, such as "unavailable".
func (c ErrorClass) String() string {
	if c >= 0 && c < NumErrorClasses {
		return errorClassNames[c]
	}
	return fmt.Sprintf("ErrorClass(%d)", int(c))
}

// Classify returns the class of a limiter's error.
func Classify(err error) ErrorClass {
	switch {
	case errors.Is(err, hybridlimit.ErrUnavailable):
		return ErrorUnavailable
	case errors.Is(err, hlsync.ErrClosed):
		return ErrorClosed
	case errors.Is(err, hybridlimit.ErrInvalidKey), errors.Is(err, hybridlimit.ErrInvalidLimit),
		errors.Is(err, hybridlimit.ErrInvalidCost), errors.Is(err, hybridlimit.ErrCostExceedsBurst):
		return ErrorInvalid
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ErrorCanceled
	}
	return ErrorOther
}

// Policy is one rule's state as the response reports it.
type Policy struct {
	// Name is the rule's name.
	Name string
	// Quota and Window are RateLimit-Policy's q and w: Quota units per
	// Window seconds.
	Quota, Window int64
	// Unit is RateLimit-Policy's qu, or "" for the default, requests.
	Unit string
	// Result is the rule's limiter's answer for this request; when the
	// rule's cost was given back, Remaining counts it again.
	Result hybridlimit.Result
	// Next is how long until more quota is available (RateLimit's t, the
	// effective window): for a token bucket (the hybrid, local, token
	// bucket and GCRA limiters) the time until its next token, for a fixed
	// window the time until it ends, for other limiters the wait a denial
	// of cost 1 named. Negative when unknown: a sliding window's or a
	// custom limiter's admission, whose quota may come back at any time.
	Next time.Duration
}

// Verdict is what the engine made of a request.
type Verdict int

const (
	// Admit: the request may proceed.
	Admit Verdict = iota
	// Limited: an enforced rule denied it.
	Limited
	// Unavailable: a FailClosed rule's limiter failed, or an enforced
	// rule's limiter denied by its own failure policy.
	Unavailable
)

// Decision is the engine's verdict on one request, for a front end to
// render.
type Decision struct {
	Verdict    Verdict
	RetryAfter time.Duration
	Policies   []Policy
	Violated   []string
}
