package ruleset

import (
	"slices"
	"sync/atomic"
	"time"
)

// The fates of a request, counted by Engine.Check.
const (
	fateAdmitted = iota
	fateLimited
	fateUnavailable
	fateCanceled
	numFates
)

// ruleCounters are one rule's counters. They belong to the rule's name, so
// a reload that keeps a rule keeps its counts.
type ruleCounters struct {
	outcomes [NumOutcomes]atomic.Uint64
	errors   [NumErrorClasses]atomic.Uint64
	// warnedNoKey is set once the rule has logged a request without a key.
	warnedNoKey atomic.Bool
}

func (c *ruleCounters) count(o Outcome) { c.outcomes[o].Add(1) }

// Stats is a snapshot of an engine's counters, for metrics.
type Stats struct {
	// Requests by what was made of them.
	Admitted    uint64 // let through
	Limited     uint64 // rejected by a rule: HTTP 429, gRPC ResourceExhausted
	Unavailable uint64 // rejected because a limit could not be checked: HTTP 503, gRPC Unavailable
	Canceled    uint64 // the request's context ended during a decision
	// CheckDuration is how long each request's check of its rules took,
	// in seconds, refunds included: from 1us (local and hybrid limiters)
	// to 100ms (a wait for Redis), about 2.5x apart.
	CheckDuration Histogram
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
	// Errors counts the limiter's errors, indexed by ErrorClass, refunds'
	// included.
	Errors [NumErrorClasses]uint64
}

// Histogram is a snapshot of a histogram with fixed buckets.
type Histogram struct {
	// Bounds are the buckets' upper bounds, ascending, in seconds. Each
	// snapshot has its own copy.
	Bounds []float64
	// Buckets are the cumulative counts, one per bound.
	Buckets []uint64
	// Count is the number of observations.
	Count uint64
	// Sum is the sum of the observations, in seconds.
	Sum float64
}

// checkBounds are the buckets of Stats.CheckDuration, in seconds.
var checkBounds = []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1}

// durations counts durations into the buckets of checkBounds. Its zero
// value is empty and ready to use; it is safe for concurrent use.
type durations struct {
	// counts[i] counts the durations in (bounds[i-1], bounds[i]];
	// counts[len(bounds)] those above the last bound.
	counts [16]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

func (h *durations) observe(d time.Duration) {
	i, _ := slices.BinarySearch(checkBounds, d.Seconds())
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// snapshot returns the counts, cumulative. The counters are read one by
// one while requests go on; Count is the sum of the counts read, so the
// buckets always add up, and Sum may be a request ahead or behind.
func (h *durations) snapshot() Histogram {
	out := Histogram{Bounds: slices.Clone(checkBounds), Buckets: make([]uint64, len(checkBounds))}
	for i := range checkBounds {
		out.Count += h.counts[i].Load()
		out.Buckets[i] = out.Count
	}
	out.Count += h.counts[len(checkBounds)].Load()
	out.Sum = time.Duration(h.sum.Load()).Seconds()
	return out
}
