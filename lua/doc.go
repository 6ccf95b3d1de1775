// Package lua holds the Redis scripts of the distributed limiters, embedded
// from the .lua files beside this one, and the two things every caller of a
// script needs: a Script that survives an emptied script cache, and one
// checked decoder for replies.
//
// Each .lua file opens with a header listing its KEYS and ARGV, with units,
// and the shape of its reply. The helpers scripts share live once each, in
// clock.lua (the clock), preamble.lua (arguments, exact integer division,
// TTL rounding), wide.lua (exact products past 2^53) and bucket.lua (the
// hybrid limiter's bucket); a script is built from the ones it uses, put
// before its body before its SHA1 is taken, since Redis makes every
// function of a script again on each run.
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
// wide.lua's mul_div, exactly, in 26-bit limbs; Params refuses limits
// whose quotients would reach 2^50, past what mul_div handles.
//
// Params builds each script's ARGV from plain integers, so the argument
// order lives next to the scripts. This package knows nothing of its
// callers and imports nothing else from the module: validating a limit,
// naming keys and turning a Decision into a Result are the callers' job.
package lua
