package sync

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// maxChargeUS bounds the refill time a key may owe on an instance, in
// microseconds: 2^50 (35 years), below which sync.lua's bucket times stay
// exact, as the exact limiters' charges are bounded (scripts.MaxCharge).
const maxChargeUS = 1 << 50

// Charge is ChargeAt at the limiter's clock's time.
func (l *Limiter) Charge(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	return l.ChargeAt(ctx, time.Time{}, key, limit, cost)
}

// ChargeAt spends cost units of key under limit whatever the key holds:
// for usage known only once the work ends (the tokens of a reply). In
// Reserve mode the allowance this instance holds pays first; the rest (in
// Optimistic mode, all of it) is owed by this instance, and its next
// message has Redis take it from the global bucket whatever the bucket
// holds, into debt if need be. ChargeAt
// sends that message before it returns (within the max wait and ctx;
// else a later round sends it, and the Result's Source is SourceLocal), so every instance denies the key from
// its next message on until refill repays the debt. A charge is never
// lost or counted twice: what is owed is restated until Redis acknowledges
// it, through lost replies, retries and a failover (docs/design.md,
// "Usage charged after the fact").
//
// The Result is Allowed (the charge landed), with what the key has left
// and, while Redis says its bucket is empty or in debt, the wait until a
// unit is back; its Source is SourceGlobal once Redis took what is owed. cost
// may exceed the burst; 0 changes nothing. A negative cost, or one that
// with what the key owes this instance already comes to 2^50 units or
// 2^50 microseconds (35 years) of refill, is refused with
// hybridlimit.ErrInvalidCost and changes nothing. A key split over parts
// is charged on every part, each its share (sharding.Share), so that the
// parts go into debt together and none admits while the key is in debt.
func (l *Limiter) ChargeAt(ctx context.Context, now time.Time, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	if err := l.checkCall(key, limit, 1); err != nil {
		return hybridlimit.Result{}, err
	}
	if cost < 0 {
		return hybridlimit.Result{}, fmt.Errorf("sync: %w: a charge of %d", hybridlimit.ErrInvalidCost, cost)
	}
	shards, err := l.shardCount(key, limit)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	t := l.nanos(l.at(now))
	home, err := l.entry(key, limit, shards)
	if err != nil {
		return hybridlimit.Result{}, fmt.Errorf("sync: a charge of key %q not recorded: %w", key, err)
	}
	home, serial, err := l.chargeParts(key, limit, shards, home, cost, t)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	src := hybridlimit.SourceLocal
	// Have Redis take what is owed now; should the round fail, or ctx end
	// first, it waits for the next round that reaches Redis. The
	// charge is recorded either way, so no error follows it: a caller
	// that retried would charge twice.
	if serial > 0 {
		if err := l.fetch(ctx, serial, l.cfg.clock.Now().Add(l.cfg.maxWait)); err == nil && ctx.Err() == nil {
			src = hybridlimit.SourceGlobal
		}
	}
	return l.charged(home, limit, src), nil
}

// charge spends cost on e at t as the mode does (account.Mode.Charge),
// what the allowance does not pay owed by e (account.Owing) as of t. It
// returns what e owes after it, and false if e was evicted before it could
// be charged.
func (l *Limiter) charge(e *entry, cost, t int64) (owed int64, ok bool, err error) {
	l.lockGather(e)
	defer l.scatterUnlock(e)
	if e.isDead() {
		return 0, false, nil
	}
	if err := checkOwed(partLimit(e), l.owing.owed(e)+cost); err != nil {
		return 0, false, fmt.Errorf("sync: %w: key %q: %w", hybridlimit.ErrInvalidCost, e.owner, err)
	}
	l.owing.add(e, l.mode.Charge(&e.ledger, &e.avail, cost), t)
	l.stats.charged.Add(uint64(cost))
	return l.owing.owed(e), true, nil
}

// checkOwed refuses owed tokens on a part of limit that Redis could not
// take exactly: scripts.MaxCharge tokens or more, or
// maxChargeUS microseconds of refill or more.
func checkOwed(limit hybridlimit.Limit, owed int64) error {
	if owed > scripts.MaxCharge {
		return fmt.Errorf("%d owed is more than %d", owed, int64(scripts.MaxCharge))
	}
	hi, lo := bits.Mul64(uint64(owed), uint64(limit.Period.Microseconds()))
	if hi > 0 || lo/uint64(limit.Rate) >= maxChargeUS {
		return fmt.Errorf("%d owed takes 2^50us or more of refill under %s", owed, limit)
	}
	return nil
}

// charged returns the Result of a charge on e under limit: what the key
// has left by Redis's last word and e's allowance, and, with no allowance
// left while Redis says the bucket is empty or in debt, the wait for one
// unit.
func (l *Limiter) charged(e *entry, limit hybridlimit.Limit, src hybridlimit.Source) hybridlimit.Result {
	held := max(e.avail.Load(), 0)
	r := l.admitted(e, limit, held, src)
	if now := l.nanos(l.cfg.clock.Now()); held == 0 && e.denyUntil.Load() > now {
		r.Remaining = 0
		r.RetryAfter = l.retryAfter(e, 1, now)
		r.ResetAfter = e.fullIn(limit, r.RetryAfter)
	}
	return r
}
