// Package faultproxy is a loopback TCP proxy for tests that sits between a
// Redis client and a real redis-server and injects faults one command at a
// time: it drops replies after the command ran, sends commands twice,
// delays or holds replies, and refuses or cuts connections.
//
// It exists to prove claims of the kind "a retried or duplicated batch never
// over-admits, a failed batch never loses consumption" against real Redis and
// the real go-redis retry logic, and to give latency and stall tests a slow
// network on demand.
//
// The proxy frames the byte streams in both directions with a small RESP2 and
// RESP3 reader, so that it counts whole commands and whole replies and can
// act on one command inside a pipeline. It relies on Redis answering each
// command with exactly one reply, in order. That holds for ordinary commands,
// pipelines and scripts, and for MULTI/EXEC as long as no fault hits a command
// between MULTI and EXEC (a duplicated command would be queued twice). It
// does not hold, and the proxy is not meant for, SUBSCRIBE and the other
// Pub/Sub modes, MONITOR, CLIENT REPLY OFF|SKIP and blocking commands that
// are duplicated. RESP3 push frames (">", such as client-tracking
// invalidations) are passed through as they come and count as no reply.
// Inline commands (plain text instead of a RESP array) are not understood:
// go-redis never sends them. A frame the proxy cannot read in either
// direction closes that connection.
//
// It is test-only code: nothing outside tests imports it.
package faultproxy
