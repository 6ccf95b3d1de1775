package local

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// Bucket is a token bucket for one limit, safe for concurrent use without a
// lock: Rate tokens are added every Period, at most Burst are held, and a
// call admits a cost of n tokens when the bucket holds them. It runs the
// math of Core (GCRA on a token clock, all integers) on a single atomic
// 64-bit word with a compare-and-swap loop, so a limit of Burst B admits
// exactly B tokens at one instant however many goroutines ask.
//
// Times are measured from the instant the bucket was made, on the monotonic
// clock; the explicit-time methods (AllowN, TakeN, TokensAt, AddAt, SetAt)
// accept any time.Time, including made-up ones before that, and measure
// them the same way (by wall clock when t carries no monotonic reading). The
// implicit-time methods (Allow, Take, Tokens, Add, Set) read the clock
// themselves: Allow once per call, the others afresh on every attempt of
// their compare-and-swap loop. Out-of-order times cannot create tokens: a
// time earlier than a previous call's sees fewer tokens, never more (see
// Core), so a call whose clock reading was overtaken by another's can only
// be refused, never over-admitted; golang/go#71360 cannot happen here.
//
// The limit of a Bucket is fixed; to change it, make a new Bucket, or use a
// Table, which takes the limit on every call. A Bucket starts no goroutine.
//
// The zero Bucket holds no tokens and admits nothing; use NewBucket. A Bucket
// must not be copied after first use. Bucket is safe for concurrent use by
// multiple goroutines.
type Bucket struct {
	// The fields every call reads come first and fit one 64-byte cache
	// line, which a contended update has to move between cores anyway.
	tat  atomic.Uint64 // Core.tat
	base time.Time     // when the bucket was made: epoch on its time axis
	p    params
	// Padding to 128 bytes: the allocator then places a Bucket on its own
	// pair of cache lines, 64-byte aligned, so buckets made one after
	// another never share a line (no false sharing) and the hot fields
	// above never straddle two.
	_ [128 - 88]byte
}

// NewBucket returns a full bucket for limit. It returns an error wrapping
// hybridlimit.ErrInvalidLimit if limit.Validate rejects the limit.
func NewBucket(limit hybridlimit.Limit) (*Bucket, error) {
	p, err := newParams(limit)
	if err != nil {
		return nil, err
	}
	b := &Bucket{base: time.Now(), p: p}
	b.tat.Store(p.full(epoch))
	return b, nil
}

// Limit returns the limit the bucket enforces.
func (b *Bucket) Limit() hybridlimit.Limit { return b.p.limit }

// epoch is where the time axis of Bucket and Table puts the instant they
// were made: 2^62 nanoseconds (146 years) after their time 0, so that every
// time within 146 years of it is non-negative, where the token clock is
// exact to the nanosecond (see params).
const epoch = 1 << 62

// since returns the time since base, from the monotonic clock, on the axis
// of a bucket made at base.
func since(base time.Time) int64 { return int64(time.Since(base)) + epoch }

// sub returns t on the axis of a bucket made at base, saturating.
func sub(t, base time.Time) int64 {
	d := int64(t.Sub(base))
	if d > math.MaxInt64-epoch {
		return math.MaxInt64
	}
	return d + epoch
}

// now returns the current time on the bucket's axis.
func (b *Bucket) now() int64 { return since(b.base) }

// at returns t on the bucket's axis.
func (b *Bucket) at(t time.Time) int64 { return sub(t, b.base) }

// Allow reports whether one token can be taken now, and takes it if so.
// The clock is read once, before the compare-and-swap loop: a reading that
// grows stale while another goroutine wins the swap is earlier than the
// truth, and an earlier time sees fewer tokens, never more (see Core), so
// a retry needs no new reading (each costs about as much as the swap).
func (b *Bucket) Allow() bool {
	v := b.p.clock(b.now())
	for {
		old := b.tat.Load()
		tat, ok := b.p.take(old, v, 1)
		if !ok {
			return false
		}
		if b.tat.CompareAndSwap(old, tat) {
			return true
		}
	}
}

// AllowN reports whether n tokens can be taken at t, and takes them if so.
// It reports false for a cost Limit.CheckCost rejects; TakeN returns the
// error instead.
func (b *Bucket) AllowN(t time.Time, n int64) bool {
	if n < 1 || n > b.p.limit.Burst {
		return false
	}
	v := b.p.clock(b.at(t))
	for {
		old := b.tat.Load()
		tat, ok := b.p.take(old, v, n)
		if !ok {
			return false
		}
		if b.tat.CompareAndSwap(old, tat) {
			return true
		}
	}
}

// Take is TakeN for one token now, with the clock read on every attempt
// inside the compare-and-swap loop. It cannot fail on a bucket made by
// NewBucket; on the zero Bucket it returns a denied Result.
func (b *Bucket) Take() hybridlimit.Result {
	r, _ := b.take(0, 1, true)
	return r
}

// TakeN takes n tokens at t if the bucket holds them, and reports the
// decision: Remaining after it, RetryAfter until n tokens would be there
// when denied, ResetAfter until the bucket is full again. A denied TakeN
// spends nothing. It returns an error wrapping hybridlimit.ErrInvalidCost or
// hybridlimit.ErrCostExceedsBurst for a cost Limit.CheckCost rejects.
func (b *Bucket) TakeN(t time.Time, n int64) (hybridlimit.Result, error) {
	return b.take(b.at(t), n, false)
}

// take runs TakeN at time x, or at the clock when clock is set.
func (b *Bucket) take(x, n int64, clock bool) (hybridlimit.Result, error) {
	if err := b.p.checkCost(n); err != nil {
		return hybridlimit.Result{Limit: b.p.limit}, err
	}
	for {
		if clock {
			x = b.now()
		}
		v := b.p.clock(x)
		old := b.tat.Load()
		tat, ok := b.p.take(old, v, n)
		if !ok {
			return b.p.result(tat, x, v, n, false), nil
		}
		if b.tat.CompareAndSwap(old, tat) {
			return b.p.taken(tat, x, v), nil
		}
	}
}

// Tokens is TokensAt(time.Now()).
func (b *Bucket) Tokens() int64 { return b.p.tokens(b.tat.Load(), b.p.clock(b.now())) }

// TokensAt returns the whole tokens the bucket holds at t, in [0, Burst].
func (b *Bucket) TokensAt(t time.Time) int64 {
	return b.p.tokens(b.tat.Load(), b.p.clock(b.at(t)))
}

// Add is AddAt(time.Now(), n), with the clock read inside the loop.
func (b *Bucket) Add(n int64) { b.add(0, n, true) }

// AddAt gives n tokens back at t, as a refund or a grant, without ever
// filling the bucket beyond Burst. A count below 1 adds nothing.
func (b *Bucket) AddAt(t time.Time, n int64) { b.add(b.at(t), n, false) }

func (b *Bucket) add(x, n int64, clock bool) {
	if n < 1 {
		return
	}
	for {
		if clock {
			x = b.now()
		}
		old := b.tat.Load()
		tat := b.p.add(old, b.p.clock(x), n)
		if tat == old || b.tat.CompareAndSwap(old, tat) {
			return
		}
	}
}

// Set is SetAt(time.Now(), tokens).
func (b *Bucket) Set(tokens int64) { b.tat.Store(b.p.set(b.p.clock(b.now()), tokens)) }

// SetAt makes the bucket hold tokens at t, clamped to [0, Burst], whatever
// it held before.
func (b *Bucket) SetAt(t time.Time, tokens int64) {
	b.tat.Store(b.p.set(b.p.clock(b.at(t)), tokens))
}
