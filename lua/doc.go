// Package lua holds the Lua scripts that the limiters of this module run in
// Redis, embedded in Files, to read or audit; the limiters load them
// themselves, and a user of the limiters never needs this package.
//
// Each file opens with a header listing its KEYS and ARGV, with units, and
// the shape of its reply. What scripts share lives once, in clock.lua (the
// clock), preamble.lua (arguments, exact integer division, TTL rounding),
// wide.lua (exact products past 2^53), bucket.lua (the hybrid limiter's
// bucket) and packed.lua (its binary numbers). The text a limiter sends,
// and whose SHA1 EVALSHA names, is the shared files a script uses, in that
// order, followed by its body: a script takes only the ones it uses, since
// Redis makes every function of a script again on each run.
//
// Time. A script reads the clock with Redis TIME, so every client of a
// limiter shares one clock, unless the caller passes a positive time in
// ARGV[1] (microseconds since the Unix epoch). That is for the simulator,
// which drives miniredis on virtual time, and for tests; such a caller must
// move its clock at least as fast as Redis's own, because TTLs still run on
// Redis time.
//
// Numbers. Lua numbers are doubles: every quantity the scripts store or
// compare is an integer below 2^53 (microseconds, token counts, fractions
// scaled to integer numerators), and replies are integers, so nothing is
// lost to rounding or to Redis truncating a Lua number to an integer reply.
// A product that can pass 2^53, such as burst times period, is divided by
// wide.lua's mul_div, exactly, in 26-bit limbs; the limiters refuse limits
// whose quotients would reach 2^50, past what mul_div handles.
//
// Interpreters. The scripts run in Redis's and Valkey's Lua 5.1 and, for
// the simulator and tests on miniredis, in Go's (gopher-lua), which differs
// in places: it has no struct library (packed.lua makes one), and an
// assignment `x = up and y` to a local x, up an upvalue that is false or
// nil, leaves x as it was. Write such a choice with if; tests run the
// scripts on both (internal/scripts TestSyncSameOnEveryInterpreter).
//
// The files, by what runs them:
//
//	token_bucket.lua         global.TokenBucket: decide, peek or refund a cost
//	gcra.lua                 global.GCRA: the same, on a theoretical arrival time
//	fixed_window.lua         global.FixedWindow
//	sliding_window.lua       global.SlidingWindow
//	sliding_log.lua          global.SlidingLog
//	concurrency_acquire.lua  global.Concurrency: take a lease
//	concurrency_release.lua  global.Concurrency: give a lease back
//	sync.lua                 sync.Limiter: one round's messages to one Redis node
//	presence.lua             sync.Limiter: record this instance, count the live ones, read the reset log
//	reshard.lua              sync.Limiter: one step of moving a split key to a new layout
//	lock.lua                 sync.Limiter: the lock a reshard holds
//	sync_reset.lua           sync.Limiter.Reset: forget keys
//	reset_log.lua            sync.Limiter.Reset: tell every instance at its next presence call
//	hit_counter.lua          rls, fixed-window mode: the reference service's counting
//	clock.lua, preamble.lua, wide.lua, bucket.lua: shared, as above
package lua
