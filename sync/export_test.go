package sync

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/sharding"
)

// What the tests of package sync_test reach inside a Limiter for: the
// Redis keys of a key and of its parts, the layout it is tracked in, and
// the loop's work run by hand.

// Keys returns the Redis keys of key's global bucket and allowances.
func (l *Limiter) Keys(key string) (bucket, allowances string) {
	return l.PartKeys(key, 0, 1, 0)
}

// PartKeys is Keys for part j of a key split s ways, in the given
// generation of its layout; two empty names for values that name no part.
func (l *Limiter) PartKeys(key string, j, s, generation int) (bucket, allowances string) {
	if sharding.CheckShards(s) != nil || j < 0 || j >= s || generation < 0 {
		return "", ""
	}
	return l.partKeys(key, j, layout{s, generation})
}

// Layout returns how this instance knows key to be split: into shards
// parts, of the given generation; 1, 0 for a whole key or one it does not
// track.
func (l *Limiter) Layout(key string) (shards, generation int) {
	if e := l.table.get(key); e != nil && !e.isDead() {
		return int(e.shards), int(e.gen)
	}
	return 1, 0
}

// Interval returns the sync interval.
func (l *Limiter) Interval() time.Duration { return l.cfg.interval }

// Sync runs one reconcile round now (syncRound).
func (l *Limiter) Sync(ctx context.Context) error { return l.syncRound(ctx) }

// Announce records the instance in the presence set now.
func (l *Limiter) Announce(ctx context.Context) error {
	if l.closed.Load() {
		return ErrClosed
	}
	return l.announce(ctx, true)
}

// Reshard runs automatic sharding now (reshardHot).
func (l *Limiter) Reshard(ctx context.Context) error { return l.reshardHot(ctx) }

// BeginRound prepares a round for the test to send and finish itself.
func (l *Limiter) BeginRound() Round { return l.beginRound() }

// ErrReshardRace is what a reshard that found nothing to move returns.
var ErrReshardRace = errReshardRace

// StripedBuild reports whether this build spreads every key's allowance
// over per-CPU counters (the tag hybridlimit_stripeall).
const StripedBuild = defaultStripeDemand == 0

// Holding returns the allowance this instance holds for key and the mark
// under which a decision puts it on the riders; 0, 0 for a key it does
// not track.
func (l *Limiter) Holding(key string) (held, rideBelow int64) {
	e := l.table.get(key)
	if e == nil || e.isDead() {
		return 0, 0
	}
	l.lockGather(e) // a striped key's allowance back in avail
	defer l.scatterUnlock(e)
	return e.avail.Load(), int64(e.rideBelow.Load())
}
