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
// An explicit time is clamped into a window around the present, the latest
// time the bucket has seen but never more than a minute past its clock:
// 2^60 units of refill either side (36 years at 10/s, 2.8 years at 13/s,
// 17 minutes at 2^40 per millisecond; see Core). A time before the window,
// such as the zero time.Time, is taken as the window's start, and so sees
// the bucket with fewer tokens than a later call, never more; a time after
// it is taken as its end, and spends from then. Without the clamp such a
// time would wrap the token clock and could read a drained bucket as full.
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
	// now is read by every call but written at most once a millisecond,
	// so it sits on the second line, away from the contended tat.
	now present
	// Padding to 128 bytes: the allocator then places a Bucket on its own
	// pair of cache lines, 64-byte aligned, so buckets made one after
	// another never share a line (no false sharing) and the hot fields
	// above never straddle two.
	_ [128 - 104]byte
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
	b.now.ns.Store(epoch)
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

const (
	// presentStep is how much later than the present a time must be to
	// move it: the present is written at most once a millisecond, so the
	// cache line holding it is not bounced between cores on every call.
	presentStep = int64(time.Millisecond)
	// presentLead is how far past the monotonic clock an explicit time
	// may move the present, so a far-future time cannot drag the window
	// of every later call along with it.
	presentLead = int64(time.Minute)
)

// present is the latest time a Bucket, or a shard of a Table, has seen on
// its axis, give or take presentStep: the centre of the window explicit
// times are clamped into (see params.within). It only moves forward, and
// never beyond the monotonic clock plus presentLead.
//
// A call compares a time with a state, so the present it clamps by must be
// loaded after that state: a state was written at a time within the
// window of a present at least as early as any loaded after it, and the
// comparison then spans less than 2^63 units. Clock readings need no
// clamping, as the present is never more than presentLead ahead of them.
type present struct{ ns atomic.Int64 }

// observe moves the present to x, a reading of the monotonic clock.
func (c *present) observe(x int64) {
	if x > c.ns.Load()+presentStep {
		c.raise(x)
	}
}

// at returns the present for a call at the explicit time x, after moving
// it to x if x is later, but not beyond the clock plus presentLead.
func (c *present) at(x int64, base time.Time) int64 {
	now := c.ns.Load()
	if x > now+presentStep {
		return c.raise(min(x, since(base)+presentLead))
	}
	return now
}

// raise moves the present to x unless it is already later, and returns
// the present.
func (c *present) raise(x int64) int64 {
	for {
		now := c.ns.Load()
		if x <= now || c.ns.CompareAndSwap(now, x) {
			return max(now, x)
		}
	}
}

// clock returns the current time on the bucket's axis, and makes it the
// present if it is later.
func (b *Bucket) clock() int64 {
	x := since(b.base)
	b.now.observe(x)
	return x
}

// at returns t on the bucket's axis, not clamped: see within.
func (b *Bucket) at(t time.Time) int64 { return sub(t, b.base) }

// within returns x, an explicit time on the bucket's axis, clamped into
// the window around the present. Call it after loading the state x will
// be compared with (see present).
func (b *Bucket) within(x int64) int64 { return b.p.within(x, b.now.at(x, b.base)) }

// Allow reports whether one token can be taken now, and takes it if so.
// The clock is read once, before the compare-and-swap loop: a reading that
// grows stale while another goroutine wins the swap is earlier than the
// truth, and an earlier time sees fewer tokens, never more (see Core), so
// a retry needs no new reading (each costs about as much as the swap).
func (b *Bucket) Allow() bool {
	v := b.p.clock(b.clock())
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
	x := b.at(t)
	for {
		old := b.tat.Load()
		v := b.p.clock(b.within(x))
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
		old := b.tat.Load()
		y := x
		if clock {
			y = b.clock()
		} else {
			y = b.within(x)
		}
		v := b.p.clock(y)
		tat, ok := b.p.take(old, v, n)
		if !ok {
			return b.p.result(tat, y, v, n, false), nil
		}
		if b.tat.CompareAndSwap(old, tat) {
			return b.p.taken(tat, y, v), nil
		}
	}
}

// ChargeAt spends n tokens at t whatever the bucket holds, as Core.Charge
// does: what it lacks becomes debt, repaid by refill before TakeN admits
// again. It returns Core.Charge's errors, changing nothing.
func (b *Bucket) ChargeAt(t time.Time, n int64) (hybridlimit.Result, error) {
	x := b.at(t)
	for {
		old := b.tat.Load()
		y := b.within(x)
		v := b.p.clock(y)
		tat, err := b.p.charge(old, v, n)
		if err != nil {
			return hybridlimit.Result{Limit: b.p.limit}, err
		}
		if tat == old || b.tat.CompareAndSwap(old, tat) {
			return b.p.charged(tat, y, v), nil
		}
	}
}

// Tokens is TokensAt(time.Now()).
func (b *Bucket) Tokens() int64 { return b.p.tokens(b.tat.Load(), b.p.clock(b.clock())) }

// TokensAt returns the whole tokens the bucket holds at t, in [0, Burst].
func (b *Bucket) TokensAt(t time.Time) int64 {
	x := b.at(t)
	tat := b.tat.Load()
	return b.p.tokens(tat, b.p.clock(b.within(x)))
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
		old := b.tat.Load()
		y := x
		if clock {
			y = b.clock()
		} else {
			y = b.within(x)
		}
		tat := b.p.add(old, b.p.clock(y), n)
		if tat == old || b.tat.CompareAndSwap(old, tat) {
			return
		}
	}
}

// Set is SetAt(time.Now(), tokens).
func (b *Bucket) Set(tokens int64) { b.tat.Store(b.p.set(b.p.clock(b.clock()), tokens)) }

// SetAt makes the bucket hold tokens at t, clamped to [0, Burst], whatever
// it held before.
func (b *Bucket) SetAt(t time.Time, tokens int64) {
	b.tat.Store(b.p.set(b.p.clock(b.within(b.at(t))), tokens))
}
