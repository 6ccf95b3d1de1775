// Package sim measures what the limiters of this module admit against what
// an exact limiter would, and what that costs in Redis commands, under
// skewed load. It drives the real limiter code (sync, global, local and the
// real Lua scripts), never a separate model of it.
//
// A run takes a Scenario (a workload: hotspot, uniform, flash, skewed-lb),
// generates its arrival stream from a seed, feeds the same stream to each
// Strategy (exact, local, optimistic, reserve, reserve-sharded) at each
// sync interval, and compares every strategy with the oracle: one exact
// token bucket per key (local.Core) that sees the merged stream in time
// order. Each Result holds the measures, overshoot, undershoot, the worst
// window and the Redis commands a decision; Report renders them as a
// table, JSON, CSV or an SVG chart, and WriteDiag prints what each run's
// limiters did and which keys it admitted most above and below the oracle.
// RunScales runs a scenario at several scales of traffic, and
// WriteScaleTable shows how the Redis cost grows with it.
//
// Two modes:
//
//   - Virtual (RunVirtual): a discrete-event simulation in virtual time,
//     deterministic for a seed. Each instance is a real limiter; the real
//     Lua runs on an embedded miniredis whose clock is the virtual clock
//     (in one interpreter kept for the run, as Redis does, rather than
//     miniredis's one per call); a sync round's reply arrives one
//     round-trip time after its request.
//   - Live (RunLive): real goroutines and real time against a real Redis or
//     Redis Cluster, which adds throughput and decision latency.
//
// The default scenarios are short, 8s of virtual time (DefaultScenario),
// so that the default run of cmd/sim, every strategy at five sync
// intervals, takes about 30s of CPU, 15s on two cores. A short run weighs
// the start (each key's first fetch, the first rounds) more than a long
// one and never reaches the hybrid limiter's idle hold; give a longer
// Duration (30s or more) for figures to quote.
//
// The command line is cmd/sim; docs/results.md says how to read its output
// and how to choose a sync interval with it.
package sim

// Where things are:
//
//	config.go     Config, DefaultRTT, and the check of a Config
//	scenario.go   Scenario, the workloads, the arrival stream they generate
//	strategy.go   the strategies, their options and sync intervals; the runs planned
//	oracle.go     the oracle: one exact token bucket per key
//	measure.go    a strategy's admissions against the oracle's
//	virtual.go    RunVirtual: the discrete-event engine, its clock, Diagnostics
//	embedded.go   the embedded miniredis of a virtual run; scripting.go its Lua
//	cluster.go    the cluster virtual mode models on one embedded server
//	live.go       RunLive: workers against a real Redis; redisload.go its CPU
//	contender.go  Contender: a limiter from outside the module, run live beside the strategies
//	counter.go    the hook counting Redis commands by slot, node, phase and key
//	messages.go   the kinds of the hybrid limiter's sync messages
//	breakdown.go  keys by class of demand, for WriteDiag
//	report.go     Report, Result: table, JSON, CSV; svg.go the chart
//	diag.go       Report.WriteDiag; SplitEffect, a split against keys whole
//	scale.go      RunScales and its table
