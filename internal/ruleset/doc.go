// Package ruleset is the engine behind the rate-limit middlewares of this
// module, httplimit (net/http) and grpclimit (gRPC): a list of rules, each
// a Limiter, a Limit and the functions that find a request's key and cost,
// evaluated in order for each request, with the refund of what a rejected
// request spent, the counters, and the atomic reload of the list. It is
// generic over the request type R (*http.Request, or a gRPC call's
// description), so each front end keeps its own Rule type, documented in
// its own terms, and compiles it into a Spec.
//
// Its decision loop, Decide, is also the Envoy rate limit service's
// (package rls): what stops an evaluation, the verdict and the give-back
// of what a rejected request spent are decided there once, for every
// front end, each front end saying how it asks one application (a limit
// the request meets) and choosing the options where they differ.
//
// The types the two front ends share (Outcome, Policy, Stats, Local) are
// defined here and aliased there; the failure policy, the error class and
// the histogram are package hybridlimit's.
//
// Files: types.go (outcomes, the neutral Decision), rule.go (Spec,
// validation, limiter keys, the announced window), fields.go (the RateLimit
// field values), engine.go (Engine: Check, Reload, Reset), decide.go
// (Decide, the one decision loop), giveback.go (GiveBack), stats.go
// (counters and the check-duration histogram).
package ruleset
