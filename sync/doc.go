// Package sync is the hybrid rate limiter: an in-memory allowance per key,
// spent in nanoseconds, reconciled in the background with one global token
// bucket per key in Redis through batched Lua scripts. Import it under
// another name, since it shadows the standard library's sync:
//
//	import hlsync "github.com/hybridlimit/hybridlimit/sync"
//
// Start with New, Limiter.Start and Limiter.Allow; docs/design.md explains
// the protocol, the key layout and each mode's bounds, and package metrics
// exports Limiter.Stats to Prometheus.
package sync

// Where things are. Each part can be read, and changed, without the others:
//
//	limiter.go    Limiter, New, the decisions' API and their fast path, slot groups
//	decide.go     the slow path: entries, the wait for a fetch, the failure policy
//	charge.go     Charge: a cost spent whatever the key holds, owed to Redis
//	parts.go      split keys: a key's layout and each entry's place in it, its
//	              parts' names, groups and limits, the home part, falling over
//	              to another part, the sum reported, the parts a charge or a
//	              reset visits; the rest sees one bucket per entry
//	entry.go      a key's (a part's) state on this instance, and its allowance counter
//	stripes.go    a hot key's allowance spread over one counter per CPU
//	table.go      the lock-free map from keys to entries
//	round.go      the protocol: a round's messages composed, sent, replies applied;
//	              one round at a time (singleRound)
//	internal/account  a key's account on this instance as plain data and pure
//	              functions: its ledger (what a message says, what a reply
//	              does), the two modes, the lease policy, the failure
//	              policy's share, what a key owes (no atomics, locks, clock or Redis)
//	transport.go  one call per node, pipelines, NOSCRIPT, WAIT, decoding
//	fetch.go      the flag a decision out of allowance raises, the rounds it
//	              waits for, the linger
//	loop.go       the loop's step (production ticks it, the simulator steps it), Close
//	schedule.go   the timing wheel of entries' next syncs
//	clock.go      Clock, and a ticker on it
//	drive.go      Driver, Loop, Round: how a virtual clock runs the loop itself;
//	              the limiter's side of it (driven)
//	nodes.go      one breaker per Redis master, probes, Ping
//	owing.go      what the entries owe Redis (account.Owing), the share a decision spends
//	reshard.go    automatic sharding: moving a key between layouts, and the moves
//	              a round's replies call for
//	heat.go       the sketch that finds hot keys
//	stats.go      Stats; histogram.go, errclass.go its parts
//	options.go    the options
//
// The words the code uses:
//
//	allowance   tokens this instance may spend for a key without asking (avail)
//	lease       the allowance a Reserve key holds ahead of its demand
//	demand      a key's measured rate of consumption on this instance (account.Usage)
//	holding     the policy's snapshot of one key: limit, demand, held, bucket left
//	            (account.Holding)
//	low mark    what a key holds when it tops up its lease
//	stretch     the factor by which a key far under its limit holds more than its lease
//	low limit   a limit too low to lease ahead: each request fetches its cost
//	issued      tokens handed to the allowance in all; issued - avail were admitted
//	            (account.Ledger.Issued)
//	account     the instance's side of a key's ledger: what it holds, owes and
//	            was granted, and the rules that move it (internal/account)
//	ledger      a per-instance record in the key's hash ("lb:" id): the last
//	            sequence number applied, the epoch, the total granted or reported
//	total       the ledger's running sum, which messages state absolutely
//	base        the total the instance holds grants for: the total as it last
//	            heard it (account.Ledger.Acked), less a hand-back unanswered
//	epoch       the first sequence number of an entry: a new epoch, a new total
//	owed        cost the failure policy admitted, or Charge charged beyond the
//	            allowance, that Redis has not yet taken (account.Owing)
//	charge      spend a cost whatever the key holds (Charge); what is lacking is owed
//	debt        a global bucket below zero by what Redis took whatever it held
//	            (owed tokens, charges): refill repays it before the key admits
//	            again (entry.inDebt and Stats.Debt count overdrawn too)
//	overdrawn   a global bucket below zero by Optimistic's debits of
//	            admissions; later denials pay it back, and it is cut a burst
//	            past the debt
//	share       the instance's part of a limit while its failure policy decides
//	round       one batch of messages: prepared, sent, applied; one runs at a
//	            time (singleRound)
//	serial      the number of a round that takes the flagged entries: a
//	            decision waits for the serial its flag names
//	apply       fold a reply into an entry (a round's replies, a mode's part)
//	withdraw    remove unspent tokens from a key's allowance (handed back,
//	            dropped, lapsed)
//	let go      drop an idle key's lease, granted and spent by no one, rather
//	            than hand it back to a bucket that has refilled
//	            (account.Policy.LetsGo; Stats.Dropped counts it)
//	fetch       a round that decisions out of allowance wait for
//	linger      how long the first of them waits for others before it goes
//	flagged     an entry a decision asked to sync before its turn
//	part        one of the buckets a split key's limit is divided over
//	home        the part an instance spends first (sharding.Home)
//	layout      how a key is split: shards and generation
//	generation  a layout's: 0 for the configured one; each reshard makes the next
//	marker      what a closed part holds: the layout the key moved to
//	node        a Redis master, with its breaker
//	reset log   the keys Reset reset lately, read with every presence call
