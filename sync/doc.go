// Package sync is the hybrid rate limiter: an in-memory allowance per key,
// spent in nanoseconds, reconciled in the background with one global token
// bucket per key in Redis through batched Lua scripts.
//
// Import it under another name, since it shadows the standard library's
// sync:
//
//	import hlsync "github.com/hybridlimit/hybridlimit/sync"
//
// Start with New, Limiter.Start and Limiter.Allow; docs/design.md explains
// the protocol, the key layout and each mode's overshoot bound. Each Result
// says in Source whether it came from local allowance, a Redis round trip
// or the failure policy. Limiter.Stats reports plain counters, histograms
// of round duration and size, and failed Redis calls by ErrorClass; package
// metrics exports them to Prometheus.
package sync
