// Package local is the in-process token bucket that the hybrid limiter spends
// from: a pure bucket model, a lock-free Bucket for one limit, and a sharded
// Table of buckets for many keys.
//
// All three share one representation, GCRA on a token clock (see Core): the
// state of a bucket is a single unsigned 64-bit integer, the token count at
// which it would be empty, so a Bucket is one atomic word updated with a
// compare-and-swap loop, and a Table entry is a key, a pointer to its limit's
// constants and that word.
//
// Every time-dependent method has an explicit-time twin, as in
// golang.org/x/time/rate: Allow is AllowN at the current instant with a cost
// of 1, TokensAt is Tokens at a given instant, and so on. The implicit-time
// methods read the clock on every attempt of their compare-and-swap loop, and
// the representation cannot create tokens from out-of-order times in any case,
// so the overshoot of golang/go#71360 cannot happen here.
//
// This package knows nothing of Redis; it depends only on the root package's
// Limit, Result and errors.
package local
