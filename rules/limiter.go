package rules

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	hlsync "github.com/hybridlimit/hybridlimit/sync"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/local"
)

var (
	_ hybridlimit.Limiter   = (*hlsync.Limiter)(nil)
	_ hybridlimit.Limiter   = (*global.Limiter)(nil)
	_ hybridlimit.Limiter   = (*Local)(nil)
	_ hybridlimit.Charger   = (*hlsync.Limiter)(nil)
	_ hybridlimit.Charger   = (*global.Limiter)(nil)
	_ hybridlimit.Charger   = (*Local)(nil)
	_ hybridlimit.Refunder  = (*hlsync.Limiter)(nil)
	_ hybridlimit.Refunder  = (*global.Limiter)(nil)
	_ hybridlimit.Refunder  = (*Local)(nil)
	_ hybridlimit.Resetter  = (*global.Limiter)(nil)
	_ hybridlimit.Resetter  = (*Local)(nil)
	_ hybridlimit.Describer = (*Local)(nil)
)

// Local adapts a *local.Table, an in-process token bucket per key, to
// hybridlimit.Limiter. Each process enforces the limit on its own: with n
// replicas behind a load balancer a client gets up to n times the limit.
// Use it for limits that protect the process itself, or where no Redis is
// at hand. It refunds, peeks, resets keys and says what it is.
//
// A Local is safe for concurrent use; it starts no goroutine. The Table
// evicts keys only when it is full or when you call its Sweep.
type Local struct {
	t *local.Table
}

// ErrNilTable is returned by NewLocal for a nil table and by the methods of
// a Local not made by NewLocal.
var ErrNilTable = errors.New("rules: nil local table")

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

// Charge spends cost of key's bucket whatever it holds, for usage known
// after the fact; see local.Table.Charge: what the bucket lacks becomes
// debt that refill repays before the next admission. It charges even
// when ctx has ended: the usage happened.
func (l *Local) Charge(_ context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	t, err := l.table()
	if err != nil {
		return hybridlimit.Result{}, err
	}
	r, err := t.Charge(key, time.Now(), limit, cost)
	if err == nil {
		r.Source = hybridlimit.SourceLocal
	}
	return r, err
}

// Traits says what the Local is: a local token bucket. A nil Local, or one
// not made by NewLocal, says nothing.
func (l *Local) Traits() hybridlimit.Traits {
	if l == nil || l.t == nil {
		return hybridlimit.Traits{}
	}
	return hybridlimit.Traits{Kind: "local", Shape: hybridlimit.ShapeTokens}
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

// Kind names the kind of a Limiter, as logs and metrics label it: the
// Kind of its Traits ("hybrid", "global" for the exact limiters, "local"),
// or "custom" for a limiter that does not say.
func Kind(l hybridlimit.Limiter) string {
	if d, ok := l.(hybridlimit.Describer); ok && d.Traits().Kind != "" {
		return d.Traits().Kind
	}
	return "custom"
}

// usable reports why l cannot decide, before any request: nil, a typed
// nil (which would panic or fail every decision, and under FailOpen limit
// nothing), or a zero value of a limiter of this module, which says nothing
// of itself.
func usable(l hybridlimit.Limiter) error {
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
	if d, ok := l.(hybridlimit.Describer); ok && d.Traits() == (hybridlimit.Traits{}) {
		if _, ok := l.(*Local); ok {
			return errors.New("a Local not made by NewLocal")
		}
		return fmt.Errorf("a %T not made by its constructor", l)
	}
	return nil
}
