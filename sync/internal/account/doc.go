// Package account is one key's account on one instance of the hybrid
// limiter, the instance's side of the key's ledger in Redis, as plain data
// and pure functions: no atomics, locks, goroutines, clock or Redis.
// Package sync keeps the table, the per-key counters decisions spend
// from, the rounds and the transport around it, and asks the account what
// to do:
//
//	ledger.go  the key's ledger on this instance (Ledger): what it was
//	           issued and Redis acknowledged, the message in flight; how a
//	           message is composed and a reply applied, on the counter
//	           decisions spend from (Counter), and the Mode interface
//	policy.go  the lease policy: how much a key holds ahead of demand
//	           (Holding, Policy), when it tops up and hands back, when it
//	           is next looked at; the demand estimate (Usage)
//	modes.go   the two modes (Reserve, Optimistic): what each asks, states,
//	           grants and owes of a charge; Optimistic's allowance, its lapse
//	           and renewal; how long a key denies after Redis said its
//	           bucket is empty
//	owing.go   what the failure policy admitted or a charge added that a key
//	           owes Redis (Owing), and the share bucket it admits from
//	           (SeedShare)
//
// Times are nanoseconds of the limiter's clock, counted from the
// limiter's start, unless a type says otherwise.
package account
