// Package rules is the vocabulary of the rate-limit rules that the front
// ends of this module share: the HTTP middleware (package httplimit) and
// the gRPC interceptors (package grpclimit). A Rule is generic over the
// front end's request; httplimit.Rule and grpclimit.Rule are its
// instances. What each rule made of a request is an Outcome, counted in
// Stats, and what a response reports of a rule is a Policy. Join, AllOf and
// AnyOf combine a front end's key functions and predicates.
//
// # What a request spends
//
// Both front ends decide through one engine. Rules are evaluated in the
// order given until one rejects the request: the first enforced rule that
// denies it (HTTP 429, gRPC ResourceExhausted), or whose limiter fails
// under FailClosed (HTTP 503, gRPC Unavailable). A request costs a rule
// only if it is admitted: what the rules before a rejection spent is
// given back to their limiters, exactly, under any concurrency, through
// the limiter's Refund (every limiter of this module has one; the cost of
// a rule whose limiter has none stays spent, counted as
// OutcomeUnrefunded). So a client that one rule denies does not use up
// another rule's quota: with per-ip 2000/s and per-key 500/s, a client
// sending 40,000 requests a second is admitted 500 a second. The rules
// after a rejection are not asked, which saves their round trips on the
// requests that are turned away; put the rule that denies most often, or
// costs least, first. Shadow rules are asked like enforced ones, and given
// back what they spent when the request is rejected, but never reject it.
// (The other way, every rule spending on every request it sees, as
// Envoy's descriptors do, lets requests one rule turns away drain the
// others; there is no option for it: a quota that should count attempts,
// not admissions, is a rule placed first.)
//
// The tightest rule, reported first, is the denying rule if any, else the
// enforced rule with the least Remaining. Ties go to the earlier rule.
//
// Local adapts an in-process table of token buckets (package local) to a
// rule's hybridlimit.Limiter.
package rules
