package httplimit

import "sync/atomic"

// The fates of a request, counted by stats.requests.
const (
	requestAdmitted = iota
	requestLimited
	requestUnavailable
	requestCanceled
	numRequestFates
)

// stats are a Middleware's plain counters. Rules are fixed at New, so each
// has its own array of counters, found by index without a lock or a map.
type stats struct {
	requests [numRequestFates]atomic.Uint64
	rules    []ruleCounters
}

type ruleCounters struct {
	outcomes [NumOutcomes]atomic.Uint64
	errors   [NumErrorClasses]atomic.Uint64
}

func (s *stats) init(rules []rule) { s.rules = make([]ruleCounters, len(rules)) }

// Stats is a snapshot of a Middleware's counters, for metrics.
type Stats struct {
	// Requests by what the middleware did with them.
	Admitted    uint64 // passed to the next handler
	Limited     uint64 // answered 429
	Unavailable uint64 // answered 503: a FailClosed rule's limiter failed, or a limiter's failure policy denied
	Canceled    uint64 // the request's context ended during a decision
	// Rules holds one entry per rule, in rule order.
	Rules []RuleStats
}

// RuleStats counts one rule's decisions.
type RuleStats struct {
	Name string
	// Limiter is the limiter's kind: "hybrid", "global", "local" or "custom".
	Limiter string
	Shadow  bool
	// Outcomes counts requests by outcome, indexed by Outcome.
	Outcomes [NumOutcomes]uint64
	// Errors counts the limiter's errors, indexed by ErrorClass.
	Errors [NumErrorClasses]uint64
}

// Stats returns a snapshot of the counters. Counters are read one by one
// while requests go on, so the snapshot is not atomic as a whole.
func (m *Middleware) Stats() Stats {
	s := Stats{
		Admitted:    m.stats.requests[requestAdmitted].Load(),
		Limited:     m.stats.requests[requestLimited].Load(),
		Unavailable: m.stats.requests[requestUnavailable].Load(),
		Canceled:    m.stats.requests[requestCanceled].Load(),
		Rules:       make([]RuleStats, len(m.rules)),
	}
	for i := range m.rules {
		rs := &s.Rules[i]
		rs.Name, rs.Limiter, rs.Shadow = m.rules[i].Name, m.rules[i].kind, m.rules[i].Shadow
		c := &m.stats.rules[i]
		for o := range rs.Outcomes {
			rs.Outcomes[o] = c.outcomes[o].Load()
		}
		for e := range rs.Errors {
			rs.Errors[e] = c.errors[e].Load()
		}
	}
	return s
}
