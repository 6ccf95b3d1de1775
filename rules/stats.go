package rules

import "github.com/hybridlimit/hybridlimit"

// Stats is a snapshot of a front end's counters (httplimit.Middleware's,
// grpclimit.Interceptor's), for metrics. Rules is in rule order; a rule
// kept by a reload keeps its counts.
type Stats struct {
	// Requests by what was made of them.
	Admitted    uint64 // let through
	Limited     uint64 // rejected by a rule, a fallback share's included: HTTP 429, gRPC ResourceExhausted
	Unavailable uint64 // rejected because a limit could not be checked: HTTP 503, gRPC Unavailable
	Canceled    uint64 // the request's context ended during a decision
	// CheckDuration is how long each request's check of its rules took,
	// in seconds, refunds included: from 1us (local and hybrid limiters)
	// to 100ms (a wait for Redis), about 2.5x apart.
	CheckDuration hybridlimit.Histogram
	// Rules holds one entry per rule, in rule order.
	Rules []RuleStats
}

// RuleStats counts one rule's decisions.
type RuleStats struct {
	Name string
	// Limiter is the limiter's kind: "hybrid", "global", "local" or "custom".
	Limiter string
	Shadow  bool
	// Outcomes counts requests by outcome, indexed by Outcome. Every
	// request the rule saw is counted once, admissions included.
	Outcomes [NumOutcomes]uint64
	// Errors counts the limiter's errors by class (those of
	// hybridlimit.LimiterErrorClasses), refunds' included.
	Errors [hybridlimit.NumErrorClasses]uint64
}
