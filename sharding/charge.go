package sharding

import (
	"context"
	"fmt"

	"github.com/hybridlimit/hybridlimit"
)

// Charge spends cost of key under limit whatever the key holds, as
// global.Limiter.Charge: for usage known only after the fact. A key split
// in the Suffix layout is charged on every part, each its share of cost
// as Quota divides a burst (the remainder to the first parts), so the
// parts go into debt together and each repays its share at its own rate:
// no part admits while the key as a whole is in debt. The Result sums
// what the parts have left; RetryAfter is the soonest a part has a unit
// again (0 while one has), ResetAfter the latest a part is full. In the
// Time layout the charge goes to the current window's part. A charge of
// a split key stops at the first part Redis fails to charge, leaving the
// parts before it charged; the error says how much was. Its other errors
// are global.Limiter.Charge's, changing nothing.
func (g *Global) Charge(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	s, err := g.count(key, limit)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	switch {
	case s == 1 && g.layout == Time:
		return g.whole.ChargeAt(ctx, g.clock(), key, limit, cost)
	case s == 1:
		return g.whole.Charge(ctx, key, limit, cost)
	}
	if err := checkSplitKey(key); err != nil {
		return hybridlimit.Result{}, err
	}
	if g.layout == Time {
		now := g.clock()
		r, err := g.parts.ChargeAt(ctx, now, PartKey(key, window(now, limit.Period, s), s), limit, cost)
		r.Limit = limit
		return r, err
	}
	if cost < 0 {
		return hybridlimit.Result{}, fmt.Errorf("sharding: %w: a charge of %d", hybridlimit.ErrInvalidCost, cost)
	}
	sum := hybridlimit.Result{Limit: limit, Allowed: true, Source: hybridlimit.SourceGlobal}
	var charged int64
	for j := range s {
		share := Share(cost, j, s)
		pk, part := PartKey(key, j, s), g.split(limit, j, s)
		r, err := g.parts.Charge(ctx, pk, part, share)
		if err != nil {
			if charged == 0 {
				return hybridlimit.Result{}, err
			}
			return hybridlimit.Result{}, fmt.Errorf("sharding: %d of a charge of %d charged to key %q, on the first %d of its %d parts: %w", charged, cost, key, j, s, err)
		}
		charged += share
		sum.Remaining += r.Remaining
		if j == 0 || r.RetryAfter < sum.RetryAfter {
			sum.RetryAfter = r.RetryAfter
		}
		sum.ResetAfter = max(sum.ResetAfter, r.ResetAfter)
	}
	return sum, nil
}
