package httplimit

import (
	"context"
	"errors"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/local"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// Limiter is what a Rule asks for a decision: spend cost from key's quota
// under limit, or say why not. *sync.Limiter (hybrid) and *global.Limiter
// (exact) satisfy it; Local adapts a *local.Table.
//
// A Limiter returns an error only when it could not decide; the Rule's
// FailurePolicy decides then. A denial is a Result with Allowed false.
type Limiter interface {
	AllowN(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error)
}

var (
	_ Limiter = (*hlsync.Limiter)(nil)
	_ Limiter = (*global.Limiter)(nil)
	_ Limiter = (*Local)(nil)
)

// Local adapts a *local.Table, an in-process token bucket per key, to
// Limiter. Each process enforces the limit on its own: with n replicas
// behind a load balancer a client gets up to n times the limit. Use it for
// limits that protect the process itself, or where no Redis is at hand.
//
// A Local is safe for concurrent use; it starts no goroutine. The Table
// evicts keys only when it is full or when you call its Sweep.
type Local struct {
	t *local.Table
}

// errNilTable is returned by NewLocal for a nil table.
var errNilTable = errors.New("httplimit: nil local table")

// NewLocal returns a Local deciding with t.
func NewLocal(t *local.Table) (*Local, error) {
	if t == nil {
		return nil, errNilTable
	}
	return &Local{t: t}, nil
}

// AllowN is AllowNAt at time.Now(). It returns ctx.Err() if ctx has ended.
func (l *Local) AllowN(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	return l.AllowNAt(ctx, time.Now(), key, limit, cost)
}

// AllowNAt decides at time now; see local.Table.AllowN. Its decisions
// have Source hybridlimit.SourceLocal.
func (l *Local) AllowNAt(ctx context.Context, now time.Time, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	if err := ctx.Err(); err != nil {
		return hybridlimit.Result{}, err
	}
	r, err := l.t.AllowN(key, now, limit, cost)
	if err == nil {
		r.Source = hybridlimit.SourceLocal
	}
	return r, err
}

// Peek reports key's state under limit without spending, as a request of
// cost 1 would find it now; see local.Table.Peek.
func (l *Local) Peek(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	if err := ctx.Err(); err != nil {
		return hybridlimit.Result{}, err
	}
	r, err := l.t.Peek(key, time.Now(), limit, 1)
	if err == nil {
		r.Source = hybridlimit.SourceLocal
	}
	return r, err
}

// Kind names the kind of a Limiter, as logs and metrics label it:
// "hybrid", "global", "local", or "custom" for any other implementation.
func Kind(l Limiter) string {
	switch l.(type) {
	case *hlsync.Limiter:
		return "hybrid"
	case *global.Limiter:
		return "global"
	case *Local:
		return "local"
	}
	return "custom"
}
