package httplimit

import "github.com/hybridlimit/hybridlimit/internal/ruleset"

// Stats is a snapshot of a Middleware's counters, for metrics: requests by
// fate (Admitted, Limited: 429, Unavailable: 503, Canceled), the
// CheckDuration histogram (how long each request's check of its rules
// took, in seconds), and per rule its Outcomes and Errors. Rules is in rule
// order; a rule kept by a reload keeps its counts.
type Stats = ruleset.Stats

// RuleStats counts one rule's decisions: Outcomes indexed by Outcome (every
// request the rule saw, admissions included) and Errors by ErrorClass.
type RuleStats = ruleset.RuleStats

// Histogram is a snapshot of a histogram with fixed buckets, in seconds.
type Histogram = ruleset.Histogram

// Stats returns a snapshot of the counters. Counters are read one by one
// while requests go on, so the snapshot is not atomic as a whole.
func (m *Middleware) Stats() Stats { return m.eng.Stats() }
