// Package ruleset is the engine behind the rate-limit middlewares of this
// module, httplimit (net/http) and grpclimit (gRPC): a list of rules, each
// a Limiter, a Limit and the functions that find a request's key and cost,
// evaluated in order for each request, with the refund of what a rejected
// request spent, the counters, and the atomic reload of the list. It is
// generic over the request type R (*http.Request, or a gRPC call's
// description), so each front end keeps its own Rule type, documented in
// its own terms, and compiles it into a Spec.
//
// The types the two front ends share (FailurePolicy, Outcome, ErrorClass,
// Policy, Stats, Local) are defined here and aliased there.
//
// Files: limiter.go (the Limiter interface, its optional methods, Local,
// Kind), types.go (policies, outcomes, error classes, the neutral
// Decision), rule.go (Spec, validation, limiter keys, the announced
// window), engine.go (Engine: Check, Reload, Reset), stats.go (counters
// and the check-duration histogram).
package ruleset
