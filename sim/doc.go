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
// order. The measures are in measure.go; Report renders them as a table,
// JSON, CSV or an SVG chart.
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
// intervals, takes about 20s of CPU. A short run weighs the start (each
// key's first fetch, the first rounds) more than a long one and never
// reaches the hybrid limiter's idle hold; give a longer Duration (30s or
// more) for figures to quote.
//
// The command line is cmd/sim; docs/results.md says how to read its output
// and how to choose a sync interval with it.
package sim
