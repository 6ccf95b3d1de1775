// Package usage carries, in an admitted request's context, what the rules
// that settle their cost (rules.Rule.Settle) spent for it, until the
// request's handler reports its actual cost (rules.ReportCost) and the
// front end settles the difference once the handler returns.
package usage

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hybridlimit/hybridlimit"
)

// Errors of Report.
var (
	// ErrNoRule: no rule of the name that settles its cost admitted the
	// request (or the request was not checked by a front end's handler).
	ErrNoRule = errors.New("no rule of that name settles this request's cost")
	// ErrSettled: the handler returned and the request was settled; a
	// report from a goroutine it left behind comes too late.
	ErrSettled = errors.New("the request's cost was settled already")
)

// Item is one rule's spend for an admitted request, and the actual cost
// its handler reported.
type Item struct {
	Rule     string
	Limiter  hybridlimit.Limiter
	Key      string
	Limit    hybridlimit.Limit
	Spent    int64 // the estimate the rule took for the request
	Actual   int64 // what the handler reported
	Reported bool
}

// Tab is an admitted request's items, safe for concurrent reports.
type Tab struct {
	mu      sync.Mutex
	items   []Item
	settled bool
}

// NewTab returns a tab of items.
func NewTab(items []Item) *Tab { return &Tab{items: items} }

type ctxKey struct{}

// With returns ctx carrying t.
func With(ctx context.Context, t *Tab) context.Context { return context.WithValue(ctx, ctxKey{}, t) }

// Report records cost as the actual cost of the request ctx belongs to
// under rule; a later report replaces an earlier one.
func Report(ctx context.Context, rule string, cost int64) error {
	if cost < 0 {
		return fmt.Errorf("%w: actual cost %d is negative", hybridlimit.ErrInvalidCost, cost)
	}
	t, _ := ctx.Value(ctxKey{}).(*Tab)
	if t == nil {
		return fmt.Errorf("%w: %q", ErrNoRule, rule)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.settled {
		return ErrSettled
	}
	for i := range t.items {
		if it := &t.items[i]; it.Rule == rule {
			it.Actual, it.Reported = cost, true
			return nil
		}
	}
	return fmt.Errorf("%w: %q", ErrNoRule, rule)
}

// Close returns the items reported, and takes no more reports: one that
// came after the settlement would be lost.
func (t *Tab) Close() []Item {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.settled = true
	var out []Item
	for _, it := range t.items {
		if it.Reported {
			out = append(out, it)
		}
	}
	return out
}
