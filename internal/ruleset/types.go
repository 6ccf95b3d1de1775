package ruleset

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/usage"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Verdict is what the engine made of a request.
type Verdict int

const (
	// Admit: the request may proceed.
	Admit Verdict = iota
	// Limited: an enforced rule denied it, its limiter's fallback share
	// included.
	Limited
	// Unavailable: a FailClosed rule's limiter failed, or an enforced
	// rule's limiter denied by its own FailClosed policy
	// (Result.FailedClosed).
	Unavailable
)

// Decision is the engine's verdict on one request, for a front end to
// render.
type Decision struct {
	Verdict    Verdict
	RetryAfter time.Duration
	Policies   []rules.Policy
	Violated   []string
	// Tab holds what the rules that settle their cost (rules.Rule.Settle)
	// spent for an admitted request, for the front end to carry in the
	// request's context and settle (Engine.Settle) once its handler
	// returns; nil when there are none.
	Tab *usage.Tab
}
