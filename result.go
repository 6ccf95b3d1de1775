package hybridlimit

import (
	"strconv"
	"time"
)

// Result is a limiter's answer to one decision, and what a peek reports.
// Every limiter in this module (local, global, hybrid) returns it, so HTTP
// headers and metrics are built the same way whatever made the decision.
type Result struct {
	// Limit is the limit the decision was made against.
	Limit Limit
	// Allowed reports whether the request was admitted and its cost spent.
	// A denied request spends nothing.
	Allowed bool
	// Source says where the decision came from: local state, a Redis round
	// trip made during the call, or the failure policy. SourceUnknown (the
	// zero value) when the limiter does not say: the in-process limiters
	// of package local used directly (rules.Local says SourceLocal), a
	// custom limiter, or a Result built by hand.
	Source Source
	// FailedClosed reports a denial by a failure policy the user chose to
	// refuse what it cannot check (FailClosed): Redis could not be
	// asked, and no limit was looked at. Front ends answer it as the
	// service's outage (HTTP 503, gRPC Unavailable). Every other denial,
	// a fallback share's (FallbackLocal) included, is a limit's: 429,
	// ResourceExhausted. Only ever true with Source SourceFallback and
	// Allowed false; false in the zero value, so a limiter that does not
	// set it denies as a limit does.
	FailedClosed bool
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

// Source is where a decision came from, as Result.Source reports it. It
// tells a decision that cost a Redis round trip from one made from memory,
// and both from one the failure policy made while Redis could not be asked.
type Source uint8

const (
	// SourceUnknown is the zero value: the limiter did not say.
	SourceUnknown Source = iota
	// SourceLocal: decided from this process's state, without a Redis
	// round trip in the call. For the hybrid limiter: cost spent from the
	// local allowance, or denied because the allowance is spent or the
	// last reply said the global bucket is empty.
	SourceLocal
	// SourceGlobal: decided after a Redis round trip made during the call.
	// The exact limiters of package global always; the hybrid limiter when
	// the decision waited for a fetch round that Redis answered.
	SourceGlobal
	// SourceFallback: decided by the failure policy because Redis could
	// not be asked (the hybrid limiter's breaker open, or its key table
	// full): the local fallback share, fail-open or fail-closed (whose
	// denials say FailedClosed).
	SourceFallback
	// NumSources is the number of sources, for arrays indexed by them.
	NumSources
)

var sourceNames = [NumSources]string{"unknown", "local", "global", "fallback"}

// String returns the source's name as logs and metrics label it, such as
// "fallback".
func (s Source) String() string {
	if s < NumSources {
		return sourceNames[s]
	}
	return "Source(" + strconv.Itoa(int(s)) + ")"
}
