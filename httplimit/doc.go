// Package httplimit serves rate limits over HTTP: a net/http middleware
// that checks each request against a list of rules (per client IP, per API
// key, per user, per route, or any combination), answers 429 Too Many
// Requests with a Retry-After and an application/problem+json body when a
// rule denies, and reports the quota on every response in the
// RateLimit-Policy and RateLimit fields of draft-ietf-httpapi-ratelimit-headers-11.
//
// A Rule names a policy, a Limiter that decides (the hybrid limiter of
// package sync, an exact limiter of package global or sharding, or an
// in-process table of package local through rules.Local), a Limit (or a
// LimitFunc per request, for plan tiers), a KeyFunc that says whose quota a
// request spends, a cost, exemptions, a shadow flag and a failure policy.
// Rules are built in Go or loaded from a JSON or YAML file (package
// httplimit/config), and swapped at run time without losing the limiters'
// state (Reload).
//
// Rules are evaluated in order until one rejects the request, and a
// request costs a rule only if it is admitted: package rules says what a
// request spends, and which rule a response reports.
//
// # Response fields
//
// RateLimit-Policy carries, per reported rule, its name, q (the burst) and
// w (the seconds an empty bucket takes to refill, or a window's period);
// RateLimit carries r, the quota available, and t, the seconds until more
// is, rounded up (every response with r=0 carries it; docs/design.md
// gives it for each algorithm). Retry-After, on a 429 or 503, is the wait
// for the request's own cost, never earlier than t. The tightest rule
// alone is reported unless WithAllPolicies.
//
// # Extension points
//
// WithOnLimited and WithOnError replace the 429 and 503 responses with the
// fields already set; WriteHeaders sets them for a decision rendered by
// hand from Check. Reset and ResetRequest forget a rule's key without
// knowing the limiter's key layout. Middleware.Stats counts every request
// by fate and every rule's outcomes, admissions included, and times each
// check; package metrics turns them into Prometheus metrics. The
// middleware logs through an injected log/slog.Logger (WithLogger says
// what) and is silent by default.
//
// Package grpclimit serves the same rules to gRPC.
package httplimit
