package ruleset

import (
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/histogram"
	"github.com/hybridlimit/hybridlimit/rules"
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
	outcomes [rules.NumOutcomes]atomic.Uint64
	errors   [hybridlimit.NumErrorClasses]atomic.Uint64
	// warnedNoKey and warnedMisconfigured are set once the rule has
	// logged a request without a key, or misconfigured.
	warnedNoKey, warnedMisconfigured atomic.Bool
}

func (c *ruleCounters) count(o rules.Outcome) { c.outcomes[o].Add(1) }

// checkDuration are the buckets of Stats.CheckDuration, in seconds.
var checkDuration = histogram.Spec{
	Bounds: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1},
	Per:    1e9,
}
