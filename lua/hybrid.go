package lua

// The scripts of the hybrid limiter (package sync). Their headers give KEYS,
// ARGV and reply; decode them with DecodeInts.
var (
	// Sync reconciles a batch of keys of one slot with the global buckets.
	Sync = load("sync")
	// Presence records a live instance and counts the live ones.
	Presence = load("presence")
	// Reshard moves a split key's parts from one layout to another, one
	// step on one part per call.
	Reshard = load("reshard")
	// SyncReset forgets keys, for the instances that hold them to forget
	// their allowance at their next message.
	SyncReset = load("sync_reset")
)
