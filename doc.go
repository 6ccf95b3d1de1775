// Package hybridlimit holds the vocabulary shared by every limiter in this
// module: the Limit a caller asks for, the Result a limiter answers with, the
// Limiter interface they all satisfy (with Refunder, Peeker, Resetter and
// Describer for what a limiter can do beyond deciding), the FailurePolicy for
// when a limit cannot be checked, the ErrorClass and Histogram of their
// metrics, the narrow Redis interface the distributed limiters depend on, and
// the Keyspace that names every key they write.
//
// The limiters themselves live in sub-packages:
//
//   - local: an in-process token bucket and a keyed table of them;
//   - global: exact limiters, one atomic Redis script per decision;
//   - sync: the hybrid limiter, local allowance reconciled with Redis in the background;
//   - lua: the Redis scripts they run, embedded, to read or audit.
//
// This package imports none of them, so each can depend on it without a cycle.
package hybridlimit
