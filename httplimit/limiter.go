package httplimit

import (
	"fmt"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
	"github.com/hybridlimit/hybridlimit/local"
)

// Limiter is what a Rule asks for a decision: spend cost from key's quota
// under limit, or say why not. *sync.Limiter (hybrid), *global.Limiter and
// *sharding.Global (exact) satisfy it; Local adapts a *local.Table.
//
// A Limiter returns an error only when it could not decide; the Rule's
// FailurePolicy decides then. A denial is a Result with Allowed false.
//
// A Limiter that also has
//
//	Refund(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) error
//
// is given back what a request spent when a later rule rejects it, and
// one with Reset(ctx, key) error can forget a key (Middleware.Reset); the
// middleware finds both methods by interface assertion.
type Limiter = ruleset.Limiter

// Local adapts a *local.Table, an in-process token bucket per key, to
// Limiter. Each process enforces the limit on its own: with n replicas
// behind a load balancer a client gets up to n times the limit. Use it for
// limits that protect the process itself, or where no Redis is at hand.
// It refunds and resets keys.
//
// A Local is safe for concurrent use; it starts no goroutine. The Table
// evicts keys only when it is full or when you call its Sweep.
type Local = ruleset.Local

// NewLocal returns a Local deciding with t. It refuses a nil Table and one
// not made by local.NewTable, which would fail every decision: a rule
// failing open would then limit nothing.
func NewLocal(t *local.Table) (*Local, error) {
	l, err := ruleset.NewLocal(t)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	return l, nil
}

// Kind names the kind of a Limiter, as logs and metrics label it:
// "hybrid", "global" (the exact limiters of packages global and
// sharding), "local", or "custom" for any other implementation.
func Kind(l Limiter) string { return ruleset.Kind(l) }
