package ruleset

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/local"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// Limiter is what a rule asks for a decision: spend cost from key's quota
// under limit, or say why not. *sync.Limiter (hybrid), *global.Limiter and
// *sharding.Global (exact) satisfy it; Local adapts a *local.Table.
//
// A Limiter returns an error only when it could not decide; the rule's
// FailurePolicy decides then. A denial is a Result with Allowed false.
type Limiter interface {
	AllowN(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error)
}

// Refunder is a Limiter that can give back what a decision took. The
// engine finds it by interface assertion, so any limiter that gains the
// method is refunded from then on.
type Refunder interface {
	Refund(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) error
}

// Peeker is a Limiter that reports a key's state without spending.
type Peeker interface {
	Peek(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error)
}

// Resetter is a Limiter that can forget a key.
type Resetter interface {
	Reset(ctx context.Context, key string) error
}

var (
	_ Limiter  = (*hlsync.Limiter)(nil)
	_ Limiter  = (*global.Limiter)(nil)
	_ Limiter  = (*Local)(nil)
	_ Refunder = (*global.Limiter)(nil)
	_ Refunder = (*Local)(nil)
	_ Resetter = (*global.Limiter)(nil)
	_ Resetter = (*Local)(nil)
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

// ErrNilTable is returned by NewLocal for a nil table and by the methods of
// a Local not made by NewLocal.
var ErrNilTable = errors.New("nil local table")

// NewLocal returns a Local deciding with t, which must be made by
// local.NewTable: a nil or zero Table would fail every decision, and a
// rule failing open would then limit nothing.
func NewLocal(t *local.Table) (*Local, error) {
	if t == nil {
		return nil, ErrNilTable
	}
	if _, err := t.Peek("", time.Time{}, hybridlimit.PerSecond(1), 1); errors.Is(err, local.ErrZeroTable) {
		return nil, fmt.Errorf("%w: %w", ErrNilTable, err)
	}
	return &Local{t: t}, nil
}

func (l *Local) table() (*local.Table, error) {
	if l == nil || l.t == nil {
		return nil, ErrNilTable
	}
	return l.t, nil
}

// AllowN is AllowNAt at time.Now(). It returns ctx.Err() if ctx has ended.
func (l *Local) AllowN(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	return l.AllowNAt(ctx, time.Now(), key, limit, cost)
}

// AllowNAt decides at time now; see local.Table.AllowN. Its decisions
// have Source hybridlimit.SourceLocal.
func (l *Local) AllowNAt(ctx context.Context, now time.Time, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	t, err := l.table()
	if err != nil {
		return hybridlimit.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return hybridlimit.Result{}, err
	}
	r, err := t.AllowN(key, now, limit, cost)
	if err == nil {
		r.Source = hybridlimit.SourceLocal
	}
	return r, err
}

// Peek reports key's state under limit without spending, as a request of
// cost 1 would find it now; see local.Table.Peek.
func (l *Local) Peek(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	t, err := l.table()
	if err != nil {
		return hybridlimit.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return hybridlimit.Result{}, err
	}
	r, err := t.Peek(key, time.Now(), limit, 1)
	if err == nil {
		r.Source = hybridlimit.SourceLocal
	}
	return r, err
}

// Refund gives cost tokens back to key's bucket, never beyond its burst;
// see local.Table.Add. It gives back even when ctx has ended: the tokens
// are this process's to return.
func (l *Local) Refund(_ context.Context, key string, limit hybridlimit.Limit, cost int64) error {
	t, err := l.table()
	if err != nil {
		return err
	}
	if err := limit.CheckCost(cost); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	return t.Add(key, time.Now(), limit, cost)
}

// Reset forgets key: its next decision finds a full bucket (see
// local.Table.Delete).
func (l *Local) Reset(_ context.Context, key string) error {
	t, err := l.table()
	if err != nil {
		return err
	}
	if err := hybridlimit.CheckKey(key); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	t.Delete(key)
	return nil
}

// Kind names the kind of a Limiter, as logs and metrics label it:
// "hybrid", "global" (the exact limiters, sharding.Global included),
// "local", or "custom" for any other implementation.
func Kind(l Limiter) string {
	switch l.(type) {
	case *hlsync.Limiter:
		return "hybrid"
	case *global.Limiter, algorithmer:
		return "global"
	case *Local:
		return "local"
	}
	return "custom"
}

// algorithmer is a limiter that says its exact algorithm: global.Limiter
// and sharding.Global. Their zero values say 0.
type algorithmer interface{ Algorithm() global.Algorithm }

// usable reports why l cannot decide, before any request: nil, a typed
// nil (which would panic or fail every decision, and under FailOpen limit
// nothing), or a zero value of a limiter of this module.
func usable(l Limiter) error {
	if l == nil {
		return errors.New("nil")
	}
	v := reflect.ValueOf(l)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		if v.IsNil() {
			return fmt.Errorf("a nil %T", l)
		}
	}
	switch x := l.(type) {
	case *Local:
		if x.t == nil {
			return errors.New("a Local not made by NewLocal")
		}
	case algorithmer:
		if x.Algorithm() == 0 {
			return fmt.Errorf("a %T not made by its constructor", l)
		}
	}
	return nil
}
