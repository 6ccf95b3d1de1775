// Package sharding splits one hot rate-limit key over several Redis Cluster
// hash slots, so that one key cannot saturate the shard that holds it.
//
// A key split S ways has S parts, each with its own global state in Redis
// and a share of the limit (Part): the parts' rates and bursts add up to the
// key's, so the key's global budget is still respected, while requests and
// sync messages for it spread over S slots that Place and Group put in S
// equal slices of the slot range, and so on different masters of a cluster
// whose masters own contiguous ranges (every cluster that redis-cli
// --cluster create or CLUSTER ADDSLOTSRANGE builds): always up to 3
// masters, and for most keys beyond (see Place and Group).
//
// Global wraps the exact limiters of package global with a suffix-sharded
// layout (every algorithm: one part per request, falling over to a sibling
// when it runs dry, reads summed over the parts) or a time-sharded one
// (FixedWindow: each window's counter on the part of its window index, with
// the whole limit). The hybrid limiter of package sync uses Part, Group and
// Home for its sharded keys, and Detector to promote hot keys.
//
// docs/design.md explains the layouts, the promotion protocol and what
// summing on read costs.
package sharding
