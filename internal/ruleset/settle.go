package ruleset

import (
	"context"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/usage"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Settle settles the actual costs a handler reported on t (rules.ReportCost)
// against what the rules spent for the request: a request that cost more
// has the rest charged whatever the key holds (hybridlimit.Charger), one
// that cost less the difference refunded. A rule the handler reported
// nothing for keeps what it spent. Settle runs once the handler returned,
// on a context of its own if ctx ended: the usage happened whether or not
// the client stayed. Each failure is counted among the rule's errors and
// logged.
func (e *Engine[R]) Settle(ctx context.Context, t *usage.Tab) {
	items := t.Close()
	if len(items) == 0 {
		return
	}
	ctx, cancel := afterwards(ctx)
	defer cancel()
	for _, it := range items {
		var err error
		switch d := it.Actual - it.Spent; {
		case d > 0:
			_, err = it.Limiter.(hybridlimit.Charger).Charge(ctx, it.Key, it.Limit, d)
		case d < 0:
			err = it.Limiter.(hybridlimit.Refunder).Refund(ctx, it.Key, it.Limit, -d)
		}
		if err != nil {
			e.settleFailed(ctx, it, err)
		}
	}
}

// settleFailed counts and logs a settlement that failed: the key keeps
// what the request spent.
func (e *Engine[R]) settleFailed(ctx context.Context, it usage.Item, err error) {
	e.mu.Lock()
	st := e.counters[it.Rule]
	e.mu.Unlock()
	if st != nil {
		st.errors[rules.Classify(err)].Add(1)
	}
	e.warn(ctx, "settling the actual cost failed", "rule", it.Rule, "key", it.Key,
		"spent", it.Spent, "actual", it.Actual, "err", err)
}
