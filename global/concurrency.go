package global

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// ConcurrencyLimit bounds work in flight: at most MaxInFlight leases held at
// once, each lasting LeaseTTL unless released first. The zero value is
// invalid.
type ConcurrencyLimit struct {
	// MaxInFlight is the number of leases that may be held at once, in
	// [1, hybridlimit.MaxQuantity].
	MaxInFlight int64
	// LeaseTTL is how long a lease lasts if its holder never releases it,
	// in [hybridlimit.MinPeriod, hybridlimit.MaxRefill]. Make it longer than
	// the work it guards: an expired lease no longer counts.
	LeaseTTL time.Duration
}

// Validate reports whether c can be enforced; errors wrap
// hybridlimit.ErrInvalidLimit.
func (c ConcurrencyLimit) Validate() error {
	switch {
	case c.MaxInFlight < 1 || c.MaxInFlight > hybridlimit.MaxQuantity:
		return fmt.Errorf("%w: max in flight %d is outside [1, %d]", hybridlimit.ErrInvalidLimit, c.MaxInFlight, int64(hybridlimit.MaxQuantity))
	case c.LeaseTTL < hybridlimit.MinPeriod || c.LeaseTTL > hybridlimit.MaxRefill:
		return fmt.Errorf("%w: lease TTL %v is outside [%v, %v]", hybridlimit.ErrInvalidLimit, c.LeaseTTL, hybridlimit.MinPeriod, hybridlimit.MaxRefill)
	}
	return nil
}

// Limit returns c as the hybridlimit.Limit reported in Result.Limit:
// Burst and Rate are MaxInFlight, Period is LeaseTTL.
func (c ConcurrencyLimit) Limit() hybridlimit.Limit {
	return hybridlimit.Limit{Rate: c.MaxInFlight, Period: c.LeaseTTL, Burst: c.MaxInFlight}
}

// Lease is one granted unit of concurrency, to be given back with Release.
// The zero Lease is held by no one; Release rejects it.
type Lease struct {
	// Key is the caller's key the lease was acquired on.
	Key string
	// ID names the lease, random and unique.
	ID string
	// Expires is when the lease ends if not released, by the clock of the
	// decision: the time an At method supplied, or else Redis TIME,
	// approximated by the local clock read before the call, so a holder
	// on a clock in step with Redis's sees its lease end no later than
	// Redis does.
	Expires time.Time
}

// ErrInvalidLease is wrapped by Release's error for a Lease that Acquire
// did not return (empty Key or ID).
var ErrInvalidLease = errors.New("global: invalid lease")

// Concurrency limits how many leases on a key are held at once, in Redis,
// exactly: Acquire grants a lease while fewer than MaxInFlight unexpired
// ones are held, Release gives it back, and a lease whose holder crashed
// expires after its TTL. Each call is one Lua script; time is Redis TIME
// unless an At method supplies it.
//
// Results use the shared Result: Source is always SourceGlobal, Remaining
// is the leases still available, RetryAfter the time until enough held
// leases expire (an upper bound, since holders release early), ResetAfter
// the time until the last one expires.
//
// The zero Concurrency has no client: its methods return an error wrapping
// hybridlimit.ErrNilClient. A Concurrency is immutable and safe for
// concurrent use; it starts no goroutines.
type Concurrency struct {
	rdb hybridlimit.Redis
	ks  hybridlimit.Keyspace
}

// NewConcurrency returns a concurrency limiter on rdb.
func NewConcurrency(rdb hybridlimit.Redis, opts ...Option) (*Concurrency, error) {
	if hybridlimit.CheckClient(rdb) != nil {
		return nil, fmt.Errorf("global: %w", hybridlimit.ErrNilClient)
	}
	ks, err := build(opts)
	if err != nil {
		return nil, fmt.Errorf("global: %w", err)
	}
	return &Concurrency{rdb: rdb, ks: ks}, nil
}

// Acquire tries to take a lease on key. When Result.Allowed the Lease must
// be released (or left to expire); otherwise it is the zero Lease.
func (c *Concurrency) Acquire(ctx context.Context, key string, limit ConcurrencyLimit) (Lease, hybridlimit.Result, error) {
	return c.acquire(ctx, 0, key, limit, false)
}

// AcquireAt is Acquire at a time the caller supplies instead of Redis TIME.
func (c *Concurrency) AcquireAt(ctx context.Context, now time.Time, key string, limit ConcurrencyLimit) (Lease, hybridlimit.Result, error) {
	us, err := micros(now)
	if err != nil {
		return Lease{}, hybridlimit.Result{}, err
	}
	return c.acquire(ctx, us, key, limit, false)
}

// Peek reports what Acquire would answer now, without taking a lease or
// writing anything.
func (c *Concurrency) Peek(ctx context.Context, key string, limit ConcurrencyLimit) (hybridlimit.Result, error) {
	_, r, err := c.acquire(ctx, 0, key, limit, true)
	return r, err
}

// PeekAt is Peek at a time the caller supplies.
func (c *Concurrency) PeekAt(ctx context.Context, now time.Time, key string, limit ConcurrencyLimit) (hybridlimit.Result, error) {
	us, err := micros(now)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	_, r, err := c.acquire(ctx, us, key, limit, true)
	return r, err
}

func (c *Concurrency) acquire(ctx context.Context, nowUS int64, key string, limit ConcurrencyLimit, peek bool) (Lease, hybridlimit.Result, error) {
	if c == nil || hybridlimit.CheckClient(c.rdb) != nil {
		return Lease{}, hybridlimit.Result{}, fmt.Errorf("global: %w", hybridlimit.ErrNilClient)
	}
	if err := limit.Validate(); err != nil {
		return Lease{}, hybridlimit.Result{}, fmt.Errorf("global: concurrency: %w", err)
	}
	keys, err := keyNames(c.ks, key, kindConcurrency)
	if err != nil {
		return Lease{}, hybridlimit.Result{}, fmt.Errorf("global: concurrency: %w", err)
	}
	id := "peek" // a peek adds no lease; the script only needs a non-empty id
	if !peek {
		id = rand.Text()
	}
	ttl := ceilMicros(limit.LeaseTTL)
	args, err := scripts.ConcurrencyArgs(nowUS, limit.MaxInFlight, ttl, id, peek)
	if err != nil {
		return Lease{}, hybridlimit.Result{}, fmt.Errorf("global: concurrency: %w", err)
	}
	// Redis starts the lease at its TIME, after this; the holder's clock
	// read before the call can only end the lease sooner than Redis does.
	start := time.Now()
	if nowUS != 0 {
		start = time.UnixMicro(nowUS)
	}
	reply, err := scripts.ConcurrencyAcquire.Run(ctx, c.rdb, keys, args...)
	if err != nil {
		return Lease{}, hybridlimit.Result{}, redisError(ctx, "concurrency", err)
	}
	d, err := scripts.DecodeDecision(reply)
	if err != nil {
		return Lease{}, hybridlimit.Result{}, fmt.Errorf("global: concurrency: %w", err)
	}
	r := hybridlimit.Result{
		Limit:      limit.Limit(),
		Allowed:    d.Allowed,
		Source:     hybridlimit.SourceGlobal,
		Remaining:  d.Remaining,
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
	}
	if !d.Allowed || peek {
		return Lease{}, r, nil
	}
	return Lease{Key: key, ID: id, Expires: start.Add(time.Duration(ttl) * time.Microsecond)}, r, nil
}

// Reset forgets key: every lease on it is dropped, held or not, and the
// next Acquire finds all MaxInFlight free. A holder whose lease was dropped
// may still Release it, which reports false.
func (c *Concurrency) Reset(ctx context.Context, key string) error {
	if c == nil || hybridlimit.CheckClient(c.rdb) != nil {
		return fmt.Errorf("global: %w", hybridlimit.ErrNilClient)
	}
	keys, err := keyNames(c.ks, key, kindConcurrency)
	if err != nil {
		return fmt.Errorf("global: concurrency: %w", err)
	}
	return del(ctx, c.rdb, "concurrency", keys)
}

// Release gives back a lease. It reports whether the lease was still held:
// false when it had expired (its work may have overlapped another holder's)
// or was already released. Releasing twice is harmless. A client that runs
// the call again after losing its reply (go-redis does, by default) makes
// the second run find the lease gone and report false for a lease the
// first run released in time: treat false as "may have expired", or turn
// the client's retries off to make it exact.
func (c *Concurrency) Release(ctx context.Context, lease Lease) (bool, error) {
	return c.release(ctx, 0, lease)
}

// ReleaseAt is Release at a time the caller supplies, which only decides
// whether the lease counts as expired.
func (c *Concurrency) ReleaseAt(ctx context.Context, now time.Time, lease Lease) (bool, error) {
	us, err := micros(now)
	if err != nil {
		return false, err
	}
	return c.release(ctx, us, lease)
}

func (c *Concurrency) release(ctx context.Context, nowUS int64, lease Lease) (bool, error) {
	if c == nil || hybridlimit.CheckClient(c.rdb) != nil {
		return false, fmt.Errorf("global: %w", hybridlimit.ErrNilClient)
	}
	if lease.Key == "" || lease.ID == "" {
		return false, ErrInvalidLease
	}
	keys, err := keyNames(c.ks, lease.Key, kindConcurrency)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalidLease, err)
	}
	args, err := scripts.ReleaseArgs(nowUS, lease.ID)
	if err != nil {
		return false, fmt.Errorf("global: concurrency: %w", err)
	}
	reply, err := scripts.ConcurrencyRelease.Run(ctx, c.rdb, keys, args...)
	if err != nil {
		return false, redisError(ctx, "concurrency", err)
	}
	v, err := scripts.DecodeInts(reply, 2)
	if err != nil {
		return false, fmt.Errorf("global: concurrency: %w", err)
	}
	return v[0] == 1, nil
}
