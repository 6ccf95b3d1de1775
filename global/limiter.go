package global

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// Algorithm selects how a Limiter decides.
type Algorithm int

// The algorithms. Their exact semantics are in the header of each script in
// package lua and in docs/design.md.
const (
	// TokenBucket holds up to Burst tokens, gaining Rate every Period
	// continuously; a request is admitted when the bucket holds its cost.
	TokenBucket Algorithm = iota + 1
	// GCRA is the generic cell rate algorithm: the same decisions as
	// TokenBucket, stored as one theoretical arrival time.
	GCRA
	// FixedWindow admits Burst per window of Period; windows are aligned to
	// the Unix epoch.
	FixedWindow
	// SlidingWindow admits Burst per sliding Period, estimated from the
	// current and previous fixed windows, the previous weighted by how much
	// of it the sliding period still covers.
	SlidingWindow
	// SlidingLog admits Burst per sliding Period exactly, by logging every
	// admitted request; memory grows with the requests in a window.
	SlidingLog
)

var algorithmNames = [...]string{
	TokenBucket:   "token-bucket",
	GCRA:          "gcra",
	FixedWindow:   "fixed-window",
	SlidingWindow: "sliding-window",
	SlidingLog:    "sliding-log",
}

// String returns the algorithm's name, such as "gcra".
func (a Algorithm) String() string {
	if a.valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

func (a Algorithm) valid() bool { return a >= TokenBucket && a <= SlidingLog }

// ErrInvalidTime is wrapped by the errors of the At methods for a time at
// or before the Unix epoch, or too far ahead for microseconds to stay exact
// in Lua once a refill time is added to it (a little after the year 2219).
var ErrInvalidTime = errors.New("global: invalid time")

// Limiter is an exact rate limiter whose state lives in Redis: each
// decision runs one Lua script there, atomically, so every Limiter over the
// same Redis and key prefix enforces one shared limit per key. The Limit is
// passed on each call; its Burst is the bucket capacity (TokenBucket, GCRA)
// or the cost a window admits (window algorithms), and Rate/Period the
// refill (token algorithms) or Period the window length. Periods are used
// at microsecond resolution, rounded up. Time is Redis TIME, unless an At
// method supplies it. Every Result it returns without error, peeks
// included, has Source hybridlimit.SourceGlobal.
//
// The zero Limiter has no client: its methods return an error wrapping
// hybridlimit.ErrNilClient. Build one with New. A Limiter is immutable and
// safe for concurrent use; it starts no goroutines.
type Limiter struct {
	rdb hybridlimit.Redis
	alg Algorithm
	ks  hybridlimit.Keyspace
}

// New returns a Limiter running alg on rdb, which may be a *redis.Client,
// a *redis.ClusterClient or any hybridlimit.Redis.
func New(rdb hybridlimit.Redis, alg Algorithm, opts ...Option) (*Limiter, error) {
	if hybridlimit.CheckClient(rdb) != nil {
		return nil, fmt.Errorf("global: %w", hybridlimit.ErrNilClient)
	}
	if !alg.valid() {
		return nil, fmt.Errorf("global: unknown algorithm %d", int(alg))
	}
	ks, err := build(opts)
	if err != nil {
		return nil, fmt.Errorf("global: %w", err)
	}
	return &Limiter{rdb: rdb, alg: alg, ks: ks}, nil
}

// Algorithm returns the algorithm the Limiter runs; 0 for a nil Limiter.
func (l *Limiter) Algorithm() Algorithm {
	if l == nil {
		return 0
	}
	return l.alg
}

// Traits says what the Limiter is: an exact limiter of its algorithm's
// shape. A nil or zero Limiter, which cannot decide, says nothing.
func (l *Limiter) Traits() hybridlimit.Traits { return l.Algorithm().Traits() }

// Traits are the Traits of an exact limiter running a (this package's, or
// sharding.Global); zero for an unknown algorithm.
func (a Algorithm) Traits() hybridlimit.Traits {
	t := hybridlimit.Traits{Kind: "global"}
	switch a {
	case TokenBucket, GCRA:
		t.Shape = hybridlimit.ShapeTokens
	case FixedWindow:
		t.Shape = hybridlimit.ShapeFixedWindow
	case SlidingWindow, SlidingLog:
		t.Shape = hybridlimit.ShapeSliding
	default:
		return hybridlimit.Traits{}
	}
	return t
}

// Allow is shorthand for AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	return l.decide(ctx, 0, key, limit, 1, scripts.Spend)
}

// AllowN decides whether a request of the given cost on key is admitted
// under limit now, by the Redis clock, and spends the cost if it is. The
// cost must be in [1, limit.Burst].
func (l *Limiter) AllowN(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	return l.decide(ctx, 0, key, limit, cost, scripts.Spend)
}

// AllowAt is AllowN at a time the caller supplies instead of Redis TIME.
// Every caller of a key must then supply time from one clock, moving at
// least as fast as Redis's (TTLs run on Redis time).
func (l *Limiter) AllowAt(ctx context.Context, now time.Time, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	us, err := micros(now)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	return l.decide(ctx, us, key, limit, cost, scripts.Spend)
}

// Peek is shorthand for PeekN(ctx, key, limit, 1).
func (l *Limiter) Peek(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	return l.decide(ctx, 0, key, limit, 1, scripts.Peek)
}

// PeekN reports what AllowN with this cost would answer now, without
// spending anything or writing to Redis: Allowed says whether it would be
// admitted, Remaining what is left now, RetryAfter how long until it would
// be admitted.
func (l *Limiter) PeekN(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	return l.decide(ctx, 0, key, limit, cost, scripts.Peek)
}

// PeekAt is PeekN at a time the caller supplies.
func (l *Limiter) PeekAt(ctx context.Context, now time.Time, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	us, err := micros(now)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	return l.decide(ctx, us, key, limit, cost, scripts.Peek)
}

// Charge spends cost units of key under limit now, by the Redis clock,
// whatever the key holds: for usage known only once the work ends (the
// tokens of a reply). The charge lands: a token bucket or GCRA goes into
// debt, which refill repays before it admits again, and the key lives
// until it is repaid; a window counts past its quota. Result.Allowed is
// true, Remaining what is left after the charge, RetryAfter the wait for
// one unit (0 while one is left), ResetAfter the wait for the idle state.
// cost may exceed limit.Burst; a charge of 0 changes nothing. A negative
// cost, or one that would take the key 2^50 units or 2^50 microseconds
// (35 years) of refill past its limit, is refused with
// hybridlimit.ErrInvalidCost and changes nothing.
func (l *Limiter) Charge(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	return l.charge(ctx, 0, key, limit, cost)
}

// ChargeAt is Charge at a time the caller supplies.
func (l *Limiter) ChargeAt(ctx context.Context, now time.Time, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	us, err := micros(now)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	return l.charge(ctx, us, key, limit, cost)
}

func (l *Limiter) charge(ctx context.Context, nowUS int64, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	if cost != 0 {
		return l.decide(ctx, nowUS, key, limit, cost, scripts.Charge)
	}
	// Nothing to spend: the state as it is, read as a peek of one unit
	// reads it (what is left, the wait for one), the charge landed.
	r, err := l.decide(ctx, nowUS, key, limit, 1, scripts.Peek)
	r.Allowed = err == nil
	return r, err
}

// Refund gives back cost units that a decision on key under limit took,
// for a request that was admitted but not served (another rule rejected
// it, the handler refused it): a bucket regains cost tokens, never more
// than its burst; a window takes cost off its current count, never below
// 0 (a count of a window that has ended is gone already); the sliding log
// removes the request's entry. Refunding a decision that was denied, or
// refunding twice, gives back what was never taken: call it once per
// admitted decision. It reports no error for a key with nothing to give
// back (absent, full, or its window over).
func (l *Limiter) Refund(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) error {
	_, err := l.refund(ctx, 0, key, limit, cost)
	return err
}

// Give is Refund that reports how much it gave back: cost, or less when
// the state held less to give (a bucket that filled up, a window count that
// restarted). A caller spreading a refund over several keys, such as the
// parts of a split key, gives the rest to the next.
func (l *Limiter) Give(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (given int64, err error) {
	return l.refund(ctx, 0, key, limit, cost)
}

// RefundAt is Give at a time the caller supplies.
func (l *Limiter) RefundAt(ctx context.Context, now time.Time, key string, limit hybridlimit.Limit, cost int64) (given int64, err error) {
	us, err := micros(now)
	if err != nil {
		return 0, err
	}
	return l.refund(ctx, us, key, limit, cost)
}

// Reset forgets key: its next decision finds a full bucket or an empty
// window, as a key never used does. It deletes the key's state of this
// Limiter's algorithm (a key used under several algorithms keeps the
// others'). Every Limiter on the same Redis and prefix sees the reset at
// once.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	keys, err := l.Keys(key)
	if err != nil {
		return err
	}
	return del(ctx, l.rdb, l.alg.String(), keys)
}

// Keys returns the names of the Redis keys that hold key's state under
// this Limiter's algorithm (two for the sliding log, one otherwise), for
// inspection, or for deleting many keys' state in one pipeline.
func (l *Limiter) Keys(key string) ([]string, error) {
	if l == nil || hybridlimit.CheckClient(l.rdb) != nil {
		return nil, fmt.Errorf("global: %w", hybridlimit.ErrNilClient)
	}
	_, kinds, err := l.script()
	if err != nil {
		return nil, fmt.Errorf("global: %w", err)
	}
	keys, err := keyNames(l.ks, key, kinds...)
	if err != nil {
		return nil, fmt.Errorf("global: %s: %w", l.alg, err)
	}
	return keys, nil
}

// del deletes keys, which share a slot, in one command.
func del(ctx context.Context, rdb hybridlimit.Redis, what string, keys []string) error {
	pipe := rdb.Pipeline()
	pipe.Del(ctx, keys...)
	_, err := pipe.Exec(ctx)
	scripts.NoteError(rdb, err)
	if err != nil {
		return redisError(ctx, what, err)
	}
	return nil
}

func (l *Limiter) refund(ctx context.Context, nowUS int64, key string, limit hybridlimit.Limit, cost int64) (int64, error) {
	reply, err := l.run(ctx, nowUS, key, limit, cost, scripts.Refund)
	if err != nil {
		return 0, err
	}
	r, err := scripts.DecodeRefund(reply, cost)
	if err != nil {
		return 0, fmt.Errorf("global: %s: %w", l.alg, err)
	}
	return r.Given, nil
}

// decide runs one decision and turns its reply into a Result.
func (l *Limiter) decide(ctx context.Context, nowUS int64, key string, limit hybridlimit.Limit, cost int64, mode scripts.Mode) (hybridlimit.Result, error) {
	reply, err := l.run(ctx, nowUS, key, limit, cost, mode)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	var d scripts.Decision
	if mode == scripts.Charge {
		d, err = scripts.DecodeCharge(reply)
		if errors.Is(err, scripts.ErrChargeTooDeep) {
			return hybridlimit.Result{}, fmt.Errorf("global: %s: %w: charge %d would take %q past the debt the scripts hold exactly",
				l.alg, hybridlimit.ErrInvalidCost, cost, key)
		}
	} else {
		d, err = scripts.DecodeDecision(reply)
	}
	if err != nil {
		return hybridlimit.Result{}, fmt.Errorf("global: %s: %w", l.alg, err)
	}
	return hybridlimit.Result{
		Limit:      limit,
		Allowed:    d.Allowed,
		Source:     hybridlimit.SourceGlobal,
		Remaining:  d.Remaining,
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
	}, nil
}

// run validates, names the keys and runs the algorithm's script in mode,
// returning its raw reply. nowUS 0 means Redis TIME.
func (l *Limiter) run(ctx context.Context, nowUS int64, key string, limit hybridlimit.Limit, cost int64, mode scripts.Mode) (any, error) {
	if l == nil || hybridlimit.CheckClient(l.rdb) != nil {
		return nil, fmt.Errorf("global: %w", hybridlimit.ErrNilClient)
	}
	if err := limit.Validate(); err != nil {
		return nil, fmt.Errorf("global: %s: %w", l.alg, err)
	}
	if mode == scripts.Charge {
		if cost < 1 || cost > scripts.MaxCharge {
			return nil, fmt.Errorf("global: %s: %w: charge %d outside [0, %d]", l.alg, hybridlimit.ErrInvalidCost, cost, int64(scripts.MaxCharge))
		}
	} else if err := limit.CheckCost(cost); err != nil {
		return nil, fmt.Errorf("global: %s: %w", l.alg, err)
	}
	p := scripts.Params{
		Now:      nowUS,
		Rate:     limit.Rate,
		PeriodUS: ceilMicros(limit.Period),
		Burst:    limit.Burst,
		Cost:     cost,
		Mode:     mode,
	}
	script, keys, args, err := l.plan(key, p)
	if mode == scripts.Charge && errors.Is(err, scripts.ErrParams) {
		return nil, fmt.Errorf("global: %s: %w: charge %d of %v takes 2^50us or more to refill", l.alg, hybridlimit.ErrInvalidCost, cost, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("global: %s: %w", l.alg, err)
	}
	reply, err := script.Run(ctx, l.rdb, keys, args...)
	if err != nil {
		return nil, redisError(ctx, l.alg.String(), err)
	}
	return reply, nil
}

// Key kinds: the suffix after the hash tag, one per kind of state.
const (
	kindTokenBucket   = "tb"
	kindGCRA          = "gcra2"
	kindFixedWindow   = "fw"
	kindSlidingWindow = "sw"
	kindSlidingLog    = "sl"
	kindSlidingMeta   = "sl.meta"
	kindConcurrency   = "cc"
)

// algorithmKinds are the kinds of the keys each algorithm's script
// touches, shared by every call: a slice made per call was an allocation
// of every decision.
var algorithmKinds = [...][]string{
	TokenBucket:   {kindTokenBucket},
	GCRA:          {kindGCRA},
	FixedWindow:   {kindFixedWindow},
	SlidingWindow: {kindSlidingWindow},
	SlidingLog:    {kindSlidingLog, kindSlidingMeta},
}

// script returns the algorithm's script and the kinds of the keys it
// touches, which the caller must not modify.
func (l *Limiter) script() (*scripts.Script, []string, error) {
	var s *scripts.Script
	switch l.alg {
	case TokenBucket:
		s = scripts.TokenBucket
	case GCRA:
		s = scripts.GCRA
	case FixedWindow:
		s = scripts.FixedWindow
	case SlidingWindow:
		s = scripts.SlidingWindow
	case SlidingLog:
		s = scripts.SlidingLog
	default:
		return nil, nil, fmt.Errorf("unknown algorithm %d", int(l.alg))
	}
	return s, algorithmKinds[l.alg], nil
}

// plan returns the script, keys and arguments of one decision.
func (l *Limiter) plan(key string, p scripts.Params) (*scripts.Script, []string, []any, error) {
	script, kinds, err := l.script()
	if err != nil {
		return nil, nil, nil, err
	}
	var args []any
	switch l.alg {
	case TokenBucket:
		args, err = p.TokenBucketArgs()
	case GCRA:
		args, err = p.GCRAArgs()
	default:
		args, err = p.WindowArgs()
	}
	if err != nil {
		return nil, nil, nil, err
	}
	keys, err := keyNames(l.ks, key, kinds...)
	if err != nil {
		return nil, nil, nil, err
	}
	return script, keys, args, nil
}

// keyNames names the Redis key of each kind of state for a caller key,
// through the Keyspace, so they share a hash tag and so a slot.
func keyNames(ks hybridlimit.Keyspace, key string, kinds ...string) ([]string, error) {
	out := make([]string, len(kinds))
	for i, kind := range kinds {
		k, err := ks.Key(key, kind)
		if err != nil {
			return nil, err
		}
		out[i] = k
	}
	return out, nil
}

// redisError turns a failed script run into the error a caller sees:
// ctx.Err() when the context ended, else one wrapping ErrUnavailable.
func redisError(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("global: %s: %w: %w", what, hybridlimit.ErrUnavailable, err)
}

// micros returns t in microseconds since the Unix epoch, checked to be
// positive (0 means Redis TIME to the scripts) and exact in Lua.
func micros(t time.Time) (int64, error) {
	us := t.UnixMicro()
	if us <= 0 || us >= scripts.MaxNow {
		return 0, fmt.Errorf("%w: %v", ErrInvalidTime, t)
	}
	return us, nil
}

// ceilMicros returns d in whole microseconds, rounded up.
func ceilMicros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}
