// Package global provides exact distributed rate limiters: every decision
// is one atomic Lua script on Redis, timed by the Redis clock, so all the
// processes sharing a Redis see one limit and none can exceed it.
//
// Five algorithms share one type, Limiter, chosen when it is built:
//
//   - TokenBucket and GCRA: a bucket of Burst tokens refilled at Rate per
//     Period; they make the same decisions and differ only in what they
//     store (a token count, or a theoretical arrival time);
//   - FixedWindow: Burst per window of Period, windows aligned to the Unix
//     epoch;
//   - SlidingWindow: the fixed-window counts of the current and previous
//     window, the previous one weighted by its overlap with the last Period;
//   - SlidingLog: every admitted request logged for Period, exact and
//     memory-hungry.
//
// Concurrency limits in-flight work rather than a rate: leases that the
// holder releases, or that expire after a TTL if the holder dies.
//
// Costs are weighted (AllowN), a Peek reads the state without spending (for
// RateLimit headers), and every time-dependent method has an At twin that
// takes the time from the caller instead of Redis (the simulator on
// virtual time; see package lua). Limits are passed on each call.
//
// Keys are named by hybridlimit.Keyspace: prefix + "{" + escaped key + "}" +
// ":" + kind, so the keys of one decision share a Cluster slot. Every key
// written has a TTL on every path. A NOSCRIPT reply (script cache emptied by
// a restart, a failover or SCRIPT FLUSH) is answered by resending the script
// and never reaches the caller.
//
// Failures. A decision that Redis could not make returns an error wrapping
// hybridlimit.ErrUnavailable and the client's error; what to do then
// (admit, deny, fall back to a local limiter) is the caller's policy. Note
// that go-redis retries a command after a network error by default, so a
// script whose reply was lost can run twice and spend twice; set
// MaxRetries to -1 on the client if a double spend is worse than an error.
// Redis replicates asynchronously: a failover can lose the last writes,
// giving clients a second chance at a limit.
package global
