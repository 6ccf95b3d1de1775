package hybridlimit

import "time"

// Result is a limiter's answer to one decision, and what a peek reports.
// Every limiter in this module (local, global, hybrid) returns it, so HTTP
// headers and metrics are built the same way whatever made the decision.
type Result struct {
	// Limit is the limit the decision was made against.
	Limit Limit
	// Allowed reports whether the request was admitted and its cost spent.
	// A denied request spends nothing.
	Allowed bool
	// Remaining is how many more cost units could be admitted right now,
	// after this decision: 0 when the limit is exhausted, never negative.
	// For the hybrid limiter it is the best knowledge of this instance.
	Remaining int64
	// RetryAfter is how long to wait before the same cost could be
	// admitted: 0 when Allowed. For the concurrency limiter it is the time
	// until the oldest lease expires, an upper bound since holders release
	// early.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is back to its full state
	// (bucket full, window over, no lease held) if nothing more is spent:
	// 0 when it already is.
	ResetAfter time.Duration
}
