// Package rls is a drop-in for Envoy's global rate limit service
// (envoyproxy/ratelimit), backed by the hybrid limiter of package sync: the
// same gRPC API (envoy.service.ratelimit.v3.RateLimitService), the same
// rules YAML, the same environment, the same stat meanings.
//
// Server is the whole service (cmd/rls runs it); Service answers
// ShouldRateLimit and can be served on a gRPC server of your own.
// docs/rls.md is the user's guide.
//
// # Counting
//
// In the default mode (HYBRIDLIMIT_MODE=hybrid) a rule of N per unit is a
// token bucket of N tokens refilled at N per unit, shared by every replica
// through one Redis or Redis Cluster: each replica spends local allowance
// and reconciles with Redis in batches, so a request costs no Redis round
// trip unless its key has no allowance left. A status then says:
//
//   - limit_remaining: the tokens this replica sees left in the bucket after
//     the request, its unspent allowance plus what Redis held at its last
//     sync; other replicas' spending since is not in it;
//   - duration_until_reset: for OK, the time until the bucket is full again
//     if nothing more is spent; for OVER_LIMIT, the time until the request
//     could be admitted. Both are rounded up to whole seconds.
//
// A request denied by one descriptor spends nothing on the others: the
// descriptors that decide the request (neither shadow_mode nor quota_mode)
// are decided first, the one with the least room first, and once one is
// over its limit the rest are only peeked at. What was spent before that
// is given back through the limiter's Refund: the replica may spend it
// again, and hands it back to Redis at its next round if it does not need
// it. Under SHADOW_MODE every descriptor is charged, since the request goes
// through. A request's plain hits over a descriptor's limit count
// nowhere; a cost (hits set on the descriptor, as Envoy sends usage when a
// stream ends: Envoy Gateway's cost.response) counts whole, over the limit
// too: it is charged (sync.Limiter.Charge), into debt, and a check without
// hits is over the limit while the bucket is in debt. With
// HYBRIDLIMIT_COUNT_EVERY_HIT every hit counts, as the reference counts
// it, and every descriptor spends, none given back.
// The loop, the verdict (quota_mode included) and the give-back
// are ruleset.Decide's, the HTTP and gRPC rules' one decision loop: the
// descriptors matched to rules are its applications, asked with AfterPeek.
//
// In fixed-window mode (HYBRIDLIMIT_MODE=fixed_window) rules are counted as
// the reference counts them, for users who need its numbers: windows
// aligned to the Unix epoch (MONTH is 30 days, YEAR 365), every hit of every
// descriptor counted, admitted or not, under the reference's key names, one
// Redis call per descriptor (lua/hit_counter.lua); limit_remaining is the
// limit minus the window's count and duration_until_reset the time to the
// window's end. STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT behaves as the
// reference's.
//
// # Failure
//
// No request waits for Redis longer than HYBRIDLIMIT_MAX_WAIT (10ms by
// default), inside the 20ms after which Envoy's filter gives up: in hybrid
// mode the limiter bounds its fetches by it, in fixed-window mode a
// deadline bounds the Redis calls. When Redis cannot be asked for a key
// (hybrid mode: the breaker of the key's node is open, or its fetch failed
// or ran out of time unanswered), the failure policy
// (HYBRIDLIMIT_FAILURE_POLICY) decides: fallback-local (hybrid mode's
// default, the limiter's own FallbackLocal: each replica enforces its share
// of the limit, starting from what it last heard of the key, and Redis
// takes what the share admitted once the node answers), fail-open,
// fail-closed, or error (fixed-window mode's default: a gRPC UNAVAILABLE
// for Envoy's failure_mode_deny to decide; in hybrid mode the limiter
// fails closed and the service answers those denials UNAVAILABLE).
//
// The health check fails until Redis has answered once, and while it does
// not answer under the policy error or REDIS_HEALTH_CHECK_ACTIVE_CONNECTION;
// in hybrid mode the check is the limiter's Ping, a write to every master
// that serves its keys.
//
// # Files
//
//   - config.go, match.go, unit.go: the rules YAML, its checks, matching;
//   - service.go: ShouldRateLimit, the descriptors as the applications of
//     ruleset.Decide; hybrid.go and fixedwindow.go, the two ways of
//     counting;
//   - runtime.go: reading and watching the runtime directory; xds.go: the
//     rules from an xDS management server (CONFIG_TYPE=GRPC_XDS_SOTW);
//   - certs.go: certificate files, read again when they change;
//   - settings.go, log.go: the environment;
//   - server.go, http.go: the listeners, health, /json and the debug port;
//   - stats.go, collector.go, mapping.go: the counters, and their
//     Prometheus names through a statsd_exporter mapping;
//   - tracing.go: OpenTelemetry spans, exported over OTLP.
package rls
