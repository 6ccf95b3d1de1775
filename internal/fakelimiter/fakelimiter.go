// Package fakelimiter holds the limiters the front ends' tests decide
// through: one that answers what a test tells it, and the in-process one on
// a table of its own.
package fakelimiter

import (
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Limiter answers with F, and records the keys it was asked about.
type Limiter struct {
	F    func(key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error)
	Keys []string
}

// AllowN records key and answers what F does.
func (l *Limiter) AllowN(_ context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	l.Keys = append(l.Keys, key)
	return l.F(key, limit, cost)
}

// Answer returns a Limiter that always answers r (with the limit filled in)
// and err.
func Answer(r hybridlimit.Result, err error) *Limiter {
	return &Limiter{F: func(_ string, limit hybridlimit.Limit, _ int64) (hybridlimit.Result, error) {
		r.Limit = limit
		return r, err
	}}
}

// Allowed is an admission with remaining left and the bucket full again
// after reset.
func Allowed(remaining int64, reset time.Duration) hybridlimit.Result {
	return hybridlimit.Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

// NewLocal returns the in-process limiter on a table of its own.
func NewLocal(tb testing.TB) *rules.Local {
	tb.Helper()
	tbl, err := local.NewTable()
	if err != nil {
		tb.Fatal(err)
	}
	l, err := rules.NewLocal(tbl)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}
