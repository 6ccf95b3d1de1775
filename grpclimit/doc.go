// Package grpclimit serves rate limits to gRPC servers: unary and stream
// server interceptors that check each call against a list of rules (per
// full method, per metadata key such as an API key, per peer address, or
// any combination), and answer a call a rule denies with
// codes.ResourceExhausted carrying a google.rpc.RetryInfo detail (the wait
// before a retry may pass) and a google.rpc.QuotaFailure naming the
// violated policy.
//
// A Rule is the rule of package rules that httplimit also serves,
// evaluated by the same engine: each names a Limiter (the hybrid limiter
// of package sync, an exact limiter of package global or sharding, an
// in-process rules.Local), a Limit or a LimitFunc, a KeyFunc, a cost,
// exemptions, a shadow flag and a failure policy. Rules run in order until
// one rejects the call, and a call costs a rule only if it is admitted:
// what the rules before a rejection spent is given back to their limiters
// (see package rules). A
// FailClosed rule whose limiter failed, or a limiter whose own FailClosed
// policy denied (Result.FailedClosed), answers codes.Unavailable with a
// RetryInfo; a denial by the hybrid limiter's fallback share, Redis being
// out of reach, is a limit's: codes.ResourceExhausted. A stream is one
// call, checked when it opens.
//
// Every response carries the rate-limit state in its header metadata,
// "ratelimit-policy" and "ratelimit", valued as the HTTP fields of
// draft-ietf-httpapi-ratelimit-headers-11 are (see package httplimit).
// WithOnLimited and WithOnError replace the status a rejected call gets.
// Reload swaps the rules without losing the limiters' state; Reset forgets
// a rule's key. Interceptor.Stats counts every call, and package metrics
// turns the counts into Prometheus metrics (NewInterceptorCollector).
//
//	ic, err := grpclimit.New([]grpclimit.Rule{
//		{Name: "per-peer", Limiter: hybrid, Limit: hybridlimit.PerSecond(100), Key: grpclimit.PeerIP()},
//		{Name: "per-key", Limiter: exact, Limit: hybridlimit.PerMinute(600), Key: grpclimit.MetadataDigest("x-api-key"),
//			Exempt: grpclimit.Methods("/grpc.health.v1.Health/*")},
//	})
//	srv := grpc.NewServer(grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream()))
//
// An Interceptor holds no goroutine and is safe for concurrent use.
package grpclimit
