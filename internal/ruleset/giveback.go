package ruleset

import (
	"context"
	"errors"

	"github.com/hybridlimit/hybridlimit"
)

// Spend is cost a limiter took for a request that did not go ahead: what
// GiveBack returns.
type Spend struct {
	Limiter hybridlimit.Limiter
	Key     string
	Limit   hybridlimit.Limit
	Cost    int64
}

// ErrNoRefund is what GiveBack reports for a limiter that cannot give back
// (no Refund method): the cost stays spent.
var ErrNoRefund = errors.New("limiter has no Refund")

// GiveBack gives each spend's cost back to its limiter, in order, on ctx,
// and calls done with the spend's index and the refund's error: nil when
// the cost is given back, ErrNoRefund when the limiter cannot give back.
// Decide calls it for what a rejected request spent, whichever front end
// asked.
func GiveBack(ctx context.Context, spends []Spend, done func(i int, err error)) {
	for i, sp := range spends {
		r, ok := sp.Limiter.(hybridlimit.Refunder)
		if !ok {
			done(i, ErrNoRefund)
			continue
		}
		done(i, r.Refund(ctx, sp.Key, sp.Limit, sp.Cost))
	}
}
