// Package httplimit serves rate limits over HTTP: a net/http middleware
// that checks each request against a list of rules (per client IP, per API
// key, per user, per route, or any combination), answers 429 Too Many
// Requests with a Retry-After and an application/problem+json body when a
// rule denies, and reports the quota on every response in the RateLimit-Policy
// and RateLimit fields of draft-ietf-httpapi-ratelimit-headers-11.
//
// A Rule names a policy, a Limiter that decides (the hybrid limiter of
// package sync, an exact limiter of package global, or an in-process table of
// package local through Local), a Limit, a KeyFunc that says whose quota a
// request spends, a cost, exemptions, a shadow flag and a failure policy.
// Rules are built in Go or loaded from a JSON or YAML file (see Config).
//
// Every rule that applies to a request is evaluated, in the order given, and
// the request is rejected if any enforced (non-shadow) rule denies it. The
// tightest rule is the one reported in the headers; see Middleware for the
// exact choice.
//
// The middleware keeps plain counters (Middleware.Stats); package metrics
// turns them into Prometheus metrics. It logs through an injected
// log/slog.Logger and is silent by default.
package httplimit
