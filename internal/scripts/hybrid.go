package scripts

import (
	"fmt"
	"time"
)

// The scripts of the hybrid limiter (package sync). Their headers give KEYS,
// ARGV and reply: Sync's in SyncHeader, SyncMsg and SyncReply, Reshard's in
// ReshardStep and ReshardReply.
var (
	// Sync reconciles a batch of keys with the global buckets, for one
	// Redis server (or Sentinel's master).
	Sync = load("sync", clock, preamble, bucket, packed)
	// SyncCluster is Sync declaring allow-cross-slot-keys, for a cluster:
	// one call carries the keys of every slot one master serves.
	SyncCluster = flagged(Sync, "allow-cross-slot-keys")
	// Presence records a live instance, counts the live ones and reads
	// the reset log: PresenceReply.
	Presence = load("presence", clock, preamble)
	// ResetLog records a key's reset for every instance's next Presence.
	ResetLog = load("reset_log", clock, preamble)
	// Reshard moves a split key's parts from one layout to another, one
	// step on one part per call.
	Reshard = load("reshard", clock, preamble, bucket)
	// Lock takes and releases a lock one holder at a time may hold.
	Lock = load("lock", preamble)
	// SyncReset forgets keys, for the instances that hold them to forget
	// their allowance at their next message.
	SyncReset = load("sync_reset", clock, preamble)
)

// PresenceReply is Presence's answer.
type PresenceReply struct {
	Live int64 // instances whose records are live, this one included when recorded
	Now  int64 // the script's time, in microseconds: the next read's since
	// Whole says that Reset holds every key reset at or after the read's
	// since; when false, any key may have been reset.
	Whole bool
	Reset []string
}

// ParsePresenceReply checks a reply of Presence: {live, now, whole,
// key...}.
func ParsePresenceReply(reply any) (PresenceReply, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) < 3 {
		return PresenceReply{}, fmt.Errorf("%w: presence reply %T, want an array of at least 3", ErrMalformedReply, reply)
	}
	live, ok1 := arr[0].(int64)
	now, ok2 := arr[1].(int64)
	whole, ok3 := arr[2].(int64)
	if !ok1 || !ok2 || !ok3 || live < 0 || now <= 0 || whole != 0 && whole != 1 || whole == 0 && len(arr) > 3 {
		return PresenceReply{}, fmt.Errorf("%w: presence reply %v", ErrMalformedReply, arr[:3])
	}
	r := PresenceReply{Live: live, Now: now, Whole: whole == 1}
	for i, v := range arr[3:] {
		key, ok := v.(string)
		if !ok {
			return PresenceReply{}, fmt.Errorf("%w: presence reply: reset key %d is %T", ErrMalformedReply, i, v)
		}
		r.Reset = append(r.Reset, key)
	}
	return r, nil
}

// ParseLockReply checks a reply of Lock: whether the lock was taken (or
// released).
func ParseLockReply(reply any) (bool, error) {
	n, ok := reply.(int64)
	if !ok || n != 0 && n != 1 {
		return false, fmt.Errorf("%w: lock reply %v (%T)", ErrMalformedReply, reply, reply)
	}
	return n == 1, nil
}

// ReshardOp is one step of a reshard on one part's bucket (reshard.lua).
type ReshardOp string

// The steps of a reshard.
const (
	// ReshardCheck changes nothing; done says the bucket is open.
	ReshardCheck ReshardOp = "check"
	// ReshardOpen makes a full (absent) bucket empty, refilling from now.
	ReshardOpen ReshardOp = "open"
	// ReshardClose replaces the bucket with the marker, replying with the
	// tokens it held.
	ReshardClose ReshardOp = "close"
	// ReshardCredit adds N tokens to an open bucket that is not full.
	ReshardCredit ReshardOp = "credit"
	// ReshardMark sets the marker on a full bucket or a marker, keeping
	// a marker of a later generation.
	ReshardMark ReshardOp = "mark"
)

// ReshardStep is one call of Reshard: the op, the part's limit, and the
// op's marker (close, mark) and number (credit: tokens; close, mark: the
// marker's TTL in milliseconds).
type ReshardStep struct {
	Op                    ReshardOp
	Rate, PeriodUS, Burst int64
	Marker                string
	N                     int64
}

// Args returns the step's ARGV after the time.
func (s ReshardStep) Args() []any {
	return []any{string(s.Op), s.Rate, s.PeriodUS, s.Burst, s.Marker, s.N}
}

// ReshardReply is Reshard's answer to one step.
type ReshardReply struct {
	Done   bool      // the step changed the bucket (check: the bucket is open)
	Tokens int64     // close: the whole tokens the bucket held
	At     time.Time // the script's clock when it ran
}

// ParseReshardReply checks a reply of Reshard.
func ParseReshardReply(reply any) (ReshardReply, error) {
	v, err := DecodeInts(reply, 3)
	if err != nil {
		return ReshardReply{}, err
	}
	if v[0] != 0 && v[0] != 1 || v[1] < 0 || v[2] <= 0 {
		return ReshardReply{}, fmt.Errorf("%w: reshard reply %v", ErrMalformedReply, v)
	}
	return ReshardReply{Done: v[0] == 1, Tokens: v[1], At: time.UnixMicro(v[2])}, nil
}
