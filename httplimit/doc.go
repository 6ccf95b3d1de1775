// Package httplimit serves rate limits over HTTP: a net/http middleware
// that checks each request against a list of rules (per client IP, per API
// key, per user, per route, or any combination), answers 429 Too Many
// Requests with a Retry-After and an application/problem+json body when a
// rule denies, and reports the quota on every response in the
// RateLimit-Policy and RateLimit fields of draft-ietf-httpapi-ratelimit-headers-11.
//
// A Rule names a policy, a Limiter that decides (the hybrid limiter of
// package sync, an exact limiter of package global or sharding, or an
// in-process table of package local through Local), a Limit (or a
// LimitFunc per request, for plan tiers), a KeyFunc that says whose quota a
// request spends, a cost, exemptions, a shadow flag and a failure policy.
// Rules are built in Go or loaded from a JSON or YAML file (see Config),
// and swapped at run time without losing the limiters' state (Reload).
//
// # What a request spends
//
// Rules are evaluated in order until one rejects the request, and a
// request costs a rule only if it is admitted: when a later rule rejects
// it, what the earlier ones spent is given back to their limiters through
// their Refund method, exactly, under any concurrency (every limiter of
// this module has one; a custom limiter without it keeps the cost, counted
// as OutcomeUnrefunded). The rules after a rejection are not asked. So a
// client that a per-key rule of 500/s denies does not use up a per-IP rule
// of 2000/s it shares with other keys, and a client sending 40,000
// requests a second is admitted the tightest limit, 500 a second. (The
// other way, every rule spending on every request it sees, as Envoy's
// descriptors do, lets requests one rule turns away drain the others;
// there is no option for it: a quota that should count attempts, not
// admissions, is a rule placed first.)
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
// until a fixed window ends; for a sliding window, whose quota comes back
// as requests age out, the wait a denial of cost 1 named, and no t on its
// admissions. t is rounded up, so r=0;t=6 means a request in 6 seconds may
// pass. Retry-After, on a 429 or 503, is the wait for this request's cost,
// rounded up, never earlier than t. The tightest rule alone is reported
// unless WithAllPolicies.
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
// default; a rule that finds no key in a request (a route rule around the
// ServeMux, a header the clients do not send) says so once.
//
// Package grpclimit serves the same rules to gRPC.
package httplimit
