// Package sim measures what the limiters of this module admit against what
// an exact limiter would, and what that costs in Redis commands, under
// skewed load. It drives the real limiter code (sync, global, local and the
// real Lua scripts), never a separate model of it.
//
// A run takes a Scenario (a workload: hotspot, uniform, flash, skewed-lb),
// generates its arrival stream from a seed, feeds the same stream to each
// Strategy (exact, local, optimistic, reserve) at each sync interval, and
// compares every strategy with the oracle: one exact token bucket per key
// (local.Core) that sees the merged stream in time order. The measures are
// in measure.go; Report renders them as a table, JSON, CSV or an SVG chart.
//
// Two modes:
//
//   - Virtual (RunVirtual): a discrete-event simulation in virtual time,
//     deterministic for a seed. Each instance is a real limiter; the Lua
//     runs on an embedded miniredis whose clock is the virtual clock; a
//     sync round's reply arrives one round-trip time after its request.
//   - Live (RunLive): real goroutines and real time against a real Redis or
//     Redis Cluster, which adds throughput and decision latency.
//
// The command line is cmd/sim; its README section says how to read the
// output and choose a sync interval.
package sim
