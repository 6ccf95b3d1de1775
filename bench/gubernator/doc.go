// Package gubernator measures Gubernator, the peer that does the hybrid
// limiter's job without a Redis, beside the hybrid limiter: four
// Gubernator daemons peered over loopback gRPC in GLOBAL behaviour against
// four hybrid instances on one Redis, on the same hotspot arrivals, against
// the same oracle (sim.RunLive with a sim.Contender).
//
// It is a module of its own, apart from bench/ too: Gubernator's
// dependencies (a Kubernetes client, etcd's) take minutes to build, which
// make test's time cannot spare, so make test does not build it; make
// gubernator runs it, and make results puts its table in docs/results.md.
package gubernator
