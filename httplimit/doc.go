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
// httplimit/config),
// and swapped at run time without losing the limiters' state (Reload).
//
// Rules are evaluated in order until one rejects the request, and a
// request costs a rule only if it is admitted: package rules says what a
// request spends, and which rule a response reports.
//
// # Response fields
//
// RateLimit-Policy carries, per reported rule, its name, q (the burst, what
// may be spent at once) and w (the window in seconds: the time an empty
// bucket takes to refill, or a window algorithm's period). RateLimit
// carries r, the available quota, and t, the effective window of the
// draft's section 4.1.2: the seconds within which the client can use no
// more than r, that is until more quota is available: the time until a
// token bucket's next token (for a full bucket, one token's time), or
// until a fixed window ends; on a denial of cost 1, its wait. A sliding
// window's quota comes back as requests age out, which its decisions do
// not say: its responses carry t when r=0, from a peek of cost 1 (a Redis
// round trip for that response only), and none otherwise. Every response
// with r=0 carries t. t is rounded up, so r=0;t=6 means a request in 6
// seconds may pass. Retry-After, on a 429 or 503, is the wait for this
// request's cost, rounded up, never earlier than t. The tightest rule
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
// middleware logs through an injected log/slog.Logger and is silent by
// default; a rule that finds no key in a request (a header the clients do
// not send) says so once, and a rule keyed by route in a middleware that
// can see no route (see Middleware.Handler) says it limits nothing, once,
// and counts it as rules.OutcomeMisconfigured.
//
// Package grpclimit serves the same rules to gRPC.
package httplimit
