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
// Limits change. A key asked under another limit than the one that wrote
// its state keeps what it holds: the token algorithms keep the tokens the
// bucket holds at that call (refilled under the old limit until then), cut
// to the new burst, and refill at the new rate from then on, so a raised
// limit admits within one refill of the new limit and a lowered one clamps
// at once; the window algorithms compare the count of the current window
// with the new quota, and a new period counts in its current window what
// the old window that overlaps it counted (the sliding log, which keeps
// every request's time, needs no conversion). The first call under the new
// limit writes the converted state, denied or not. The header of each
// script in package lua gives the exact rule.
//
// Refund gives back what an admitted decision took, for a request that
// was not served after all (another rule rejected it): a bucket regains
// the tokens, never beyond its burst; a window takes the cost off its
// current count; the sliding log removes the request's entry. Reset forgets
// a key, as if it had never been used.
//
// Charge spends a cost that is known only once the work ends (the tokens
// of a reply), whatever the key holds: a bucket goes into debt, which
// refill repays before it admits again, and a window counts past its
// quota. Admitting on an estimate with AllowN and then charging the excess
// (or refunding the shortfall) keeps usage exact. The concurrency limiter
// has no charge.
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
