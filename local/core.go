package local

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// Core is the pure token bucket: the math every bucket in this package runs,
// on a plain struct, with the time passed in. Bucket wraps it in a
// compare-and-swap loop, Table keeps one per key, and simulators and fuzz
// tests use it directly as the model.
//
// The algorithm is GCRA, the generic cell rate algorithm: a continuous
// token bucket kept as one number, tat, the instant at which the bucket will
// be full again. With T = Period/Rate, the time one token takes to arrive,
// the bucket holds Burst - ceil((tat - t)/T) tokens at time t, never more
// than Burst; taking n tokens at t moves tat to max(tat, t) + n·T if that
// leaves tat - t ≤ Burst·T, and changes nothing otherwise. A full bucket
// spent at t is full again at t + n·T, as in golang.org/x/time/rate and
// lua/gcra.lua.
//
// Units: times are int64 nanoseconds, on any axis the caller likes. tat is
// an unsigned 64-bit count of units, a token being a whole number of units
// and a unit at most a nanosecond of refill, and time t maps to the token
// clock, t times the units a nanosecond adds, rounded down, computed with one
// 64×64-bit multiply and a shift (see params). All arithmetic is on
// integers: a limit of Burst B admits exactly B tokens at one instant and
// nothing drifts. For the usual limits, those whose Rate/gcd(Rate, Period)
// is at most 16 (10/s, 3/s, 7/min, 100/h...), nothing is rounded at all and
// a token due at a whole nanosecond arrives exactly then. For the others
// the rate is exact to 2^-63, and a token due within a sliver of a
// nanosecond boundary may arrive a nanosecond early or late (and before
// time 0, a nanosecond late). Bucket and Table put the instant they are
// made at 2^62ns (146 years) on their axis, and clamp times to within 2^60
// units (at most 2^60ns) of the present, so the times they see are positive.
//
// There is no last-update time. A time earlier than an earlier call's sees
// the bucket as of that instant after everything already spent, so it can
// only see fewer tokens than a later time, never more, and no call moves
// the state backwards. Out-of-order times therefore cannot create tokens:
// over any set of calls the tokens admitted never exceed Burst plus the
// tokens added up to the latest time among them.
//
// The token clock and tat wrap modulo 2^64 and are compared by their
// signed difference. Core takes every time as given, and is exact while the
// times of its calls lie within 2^62 units of one another: 146 years at one
// unit a nanosecond (10/s), 11 years at 13/s, about an hour at the largest
// limit Validate accepts (2^40 per millisecond). Beyond that, a time far
// enough before a state the bucket has been through wraps, and may read a
// drained bucket as full; callers with untrusted times must clamp them, as
// Bucket and Table do: they hold every explicit time within 2^60 units of
// the present (see params.within), so such a time sees the bucket as of
// the window's start, with fewer tokens, never more. And a full bucket,
// stored 2^62 units behind the clock, reads as empty once left untouched
// for longer, until as long again has passed. A Table forgets an idle full
// bucket only when an insert into its shard or Sweep finds it, so at such
// limits call Sweep more often than that; a Bucket should be used within
// it.
//
// The zero Core holds no tokens and refuses every cost; use NewCore. A Core
// is a value: copy it to snapshot it. It is not safe for concurrent use.
type Core struct {
	p   params
	tat uint64
}

// NewCore returns a full bucket for limit at now. It returns an error
// wrapping hybridlimit.ErrInvalidLimit if limit.Validate rejects the limit.
// The bucket also reads full at earlier instants, back to 2^62 units of
// refill before now.
func NewCore(limit hybridlimit.Limit, now int64) (Core, error) {
	p, err := newParams(limit)
	if err != nil {
		return Core{}, err
	}
	return Core{p: p, tat: p.full(now)}, nil
}

// Limit returns the limit the bucket enforces.
func (c *Core) Limit() hybridlimit.Limit { return c.p.limit }

// Take spends n tokens at now if the bucket holds them, and reports the
// decision. A denied Take spends nothing. It returns an error wrapping
// hybridlimit.ErrInvalidCost or hybridlimit.ErrCostExceedsBurst, and changes
// nothing, for a cost Limit.CheckCost rejects.
func (c *Core) Take(now, n int64) (hybridlimit.Result, error) {
	if err := c.p.checkCost(n); err != nil {
		return hybridlimit.Result{Limit: c.p.limit}, err
	}
	v := c.p.clock(now)
	tat, ok := c.p.take(c.tat, v, n)
	c.tat = tat
	return c.p.result(tat, now, v, n, ok), nil
}

// Peek reports what Take(now, n) would decide, without spending anything:
// Allowed says whether n tokens are there, Remaining is the tokens held,
// RetryAfter is the wait for n tokens (0 when Allowed) and ResetAfter the
// wait for a full bucket. It returns the same errors as Take.
func (c *Core) Peek(now, n int64) (hybridlimit.Result, error) {
	if err := c.p.checkCost(n); err != nil {
		return hybridlimit.Result{Limit: c.p.limit}, err
	}
	v := c.p.clock(now)
	_, ok := c.p.take(c.tat, v, n)
	return c.p.result(c.tat, now, v, n, ok), nil
}

// Charge spends n tokens at now whatever the bucket holds, for usage that
// has happened (the tokens of a reply, known only once it ends): what the
// bucket lacks becomes debt, which refill repays before Take admits
// anything again. n may exceed Burst. Result.Allowed is true (the charge
// landed), Remaining the tokens left after it, RetryAfter the wait for one
// token (0 while one is left) and ResetAfter the wait for a full bucket. A
// charge of 0 changes nothing. It returns an error wrapping
// hybridlimit.ErrInvalidCost, and changes nothing, for a negative n or one
// that would leave the bucket more than MaxDebt(limit) tokens short.
func (c *Core) Charge(now, n int64) (hybridlimit.Result, error) {
	v := c.p.clock(now)
	tat, err := c.p.charge(c.tat, v, n)
	if err != nil {
		return hybridlimit.Result{Limit: c.p.limit}, err
	}
	c.tat = tat
	return c.p.charged(tat, now, v), nil
}

// MaxDebt returns the most tokens a bucket of limit can be short (its
// burst and its debt) after a Charge: as many as maxShort units hold,
// which keeps the wrapping comparison of its state sound.
func MaxDebt(limit hybridlimit.Limit) (int64, error) {
	p, err := newParams(limit)
	if err != nil {
		return 0, err
	}
	return p.maxShortTokens(), nil
}

// Tokens returns the whole tokens the bucket holds at now, in [0, Burst].
func (c *Core) Tokens(now int64) int64 { return c.p.tokens(c.tat, c.p.clock(now)) }

// Add gives n tokens back at now, as a refund or a grant, never filling the
// bucket beyond Burst. A bucket Add fills reads full at earlier times too,
// like a new one. A count below 1 adds nothing.
func (c *Core) Add(now, n int64) {
	if n < 1 {
		return
	}
	c.tat = c.p.add(c.tat, c.p.clock(now), n)
}

// Set makes the bucket hold tokens at now, clamped to [0, Burst]. A bucket
// Set fills reads full at earlier times too, like a new one.
func (c *Core) Set(now, tokens int64) { c.tat = c.p.set(c.p.clock(now), tokens) }

// SetLimit makes the bucket enforce limit from now on. The bucket keeps the
// tokens it holds at now, the fraction of the next one included, cut to the
// new burst, and refills at the new rate from now: 10/s drained and raised
// to 100/s half a second later holds 5 tokens and gains one every 10ms; a
// lowered burst clamps at once. A now before the instant at which the
// bucket was last empty converts at that instant instead, with no tokens:
// an early time cannot forgive what the bucket was short of. Core takes
// times as given, so a now earlier than a call already made counts the new
// rate from that earlier time; Table converts at the latest time it has
// seen. It returns an error wrapping hybridlimit.ErrInvalidLimit, and
// changes nothing, if limit.Validate rejects the limit.
func (c *Core) SetLimit(now int64, limit hybridlimit.Limit) error {
	p, err := newParams(limit)
	if err != nil {
		return err
	}
	c.tat = convert(&c.p, &p, c.tat, now)
	c.p = p
	return nil
}

// fullSlack is how far behind the clock the state of a full bucket is put,
// in units, half the range of the wrapping comparison: the bucket then
// reads full 2^62 units either side of the instant it was found full.
const fullSlack = 1 << 62

// maxDuration is the wait reported when a wait would not fit a Duration.
const maxDuration = time.Duration(math.MaxInt64)

// params is the fixed-point form of one Limit. Tokens are counted in units,
// one token being one units, and the token clock at t nanoseconds reads
// floor(t·mul / 2^shift) units, where mul/2^shift approximates the units a
// nanosecond adds, to 64 significant bits. Two cases:
//
//   - Exact: when Rate/gcd(Rate, Period) is at most maxExactRate, as for
//     10/s (1), 3/s (3) or 100/min (1), a unit is 1/r ns with
//     r = Rate/gcd(Rate, Period), a token is Period/gcd units, and the clock
//     is exactly t·r: there is no rounding at all.
//   - Fixed-point: otherwise a token is 2^f units, f the least making a unit
//     at most a nanosecond of refill (f = 0 beyond 10^9 tokens per second),
//     and mul is rounded up, by less than one part in 2^63. A token is then
//     exact to the nanosecond but for ties: one due within about
//     (tokens since the last full bucket)·2^-63 ns of a nanosecond boundary
//     may arrive a nanosecond early or late.
//
// params are immutable once made.
type params struct {
	mul   uint64 // in [2^63, 2^64)
	tol   uint64 // Burst·one: the most units a bucket can be short
	one   uint64 // units per token
	shift uint32 // in [26, 118]
	perNs uint32 // units per nanosecond in the exact case, else 0
	span  int64  // nanoseconds worth at most windowUnits: see within
	limit hybridlimit.Limit
}

// maxExactRate bounds the units per nanosecond of the exact case, and so
// how fast its clock runs: a full bucket, stored 2^62 units behind the
// clock, reads as empty after 2^62 units untouched, 9 years at 16 units a
// nanosecond.
const maxExactRate = 16

// windowUnits is how far, in units, Bucket and Table let an explicit time
// lie from the present (see params.within). A state is written at a time
// within it, at most tol ≤ 2^59 units ahead of the clock (maxShort after
// convert), and read at a time within it, so the two differ by at most
// about 2^62 units, and the wrapping comparison, good to 2^63, never reads
// a drained bucket as full.
const windowUnits = 1 << 60

// maxShort is the most units convert leaves a bucket short of, at the
// time of the conversion: 73 years at one unit a nanosecond, 35 minutes at
// 2^40 tokens a millisecond. With the window either side, a later call
// reads the bucket at most about 2^62 units short, short of the 2^63 at
// which the comparison wraps, so it stays empty as long as the
// representation can tell.
const maxShort = 1 << 61

// newParams validates l and computes its fixed-point constants.
func newParams(l hybridlimit.Limit) (params, error) {
	if err := l.Validate(); err != nil {
		return params{}, fmt.Errorf("local: %w", err)
	}
	rate, period := uint64(l.Rate), uint64(l.Period)
	// A nanosecond adds num/den units and a token is one units.
	var num, den, one uint64
	var perNs uint32
	if g := gcd(rate, period); rate/g <= maxExactRate {
		num, den, one = rate/g, 1, period/g
		perNs = uint32(num)
	} else {
		// The least f with 2^f ≥ Period/Rate, so a unit is at most 1ns.
		f := bits.Len64((period+rate-1)/rate - 1)
		num, den, one = rate<<f, period, 1<<f // rate<<f ≤ 2·period < 2^56
	}
	// num·2^shift/den then lies in (2^62, 2^64); one more bit if below
	// 2^63. Validate bounds rate by 2^40 and period by 2^55, so shift is in
	// [26, 117] here and num<<shift fits in 128 bits.
	shift := uint(63 + bits.Len64(den) - bits.Len64(num))
	q, r := scaledQuo(num, den, shift)
	if q < 1<<63 {
		shift++
		q, r = scaledQuo(num, den, shift)
	}
	if r != 0 && q == math.MaxUint64 { // rounding up would overflow: one bit less
		shift--
		q, r = scaledQuo(num, den, shift)
	}
	if r != 0 {
		q++
	}
	// The span is floor(windowUnits·2^shift / mul) ns, over which the
	// clock advances at most windowUnits+1 units. A unit is at most a
	// nanosecond of refill, so mul/2^shift ≥ 1, shift ≤ 63 and the
	// dividend's high word, 2^(shift-4), is below mul; the span is at
	// most 2^60 ns (36 years).
	span, _ := bits.Div64(1<<(shift-4), 0, q)
	return params{
		mul:   q,
		tol:   uint64(l.Burst) * one, // Refill·num/den ≤ 2^55·16: no overflow
		one:   one,
		shift: uint32(shift),
		perNs: perNs,
		span:  int64(min(span, windowUnits)),
		limit: l,
	}, nil
}

// within returns x clamped to the window of span either side of now, the
// present of a Bucket or a Table shard (at most 2^62+2^61 ns on their
// axis, so nothing overflows). A time before the window is taken as its
// start, and sees fewer tokens than it would have, never more; a time
// after it as its end, and spends from then.
func (p *params) within(x, now int64) int64 { return min(max(x, now-p.span), now+p.span) }

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// scaledQuo returns the quotient and remainder of a·2^s / b, for a quotient
// below 2^64.
func scaledQuo(a, b uint64, s uint) (q, r uint64) {
	var hi, lo uint64
	if s >= 64 {
		hi = a << (s - 64)
	} else {
		hi, lo = a>>(64-s), a<<s
	}
	return bits.Div64(hi, lo, b)
}

// product returns t·mul as a two's-complement 128-bit integer.
func (p *params) product(t int64) (hi, lo uint64) {
	hi, lo = bits.Mul64(uint64(t), p.mul)
	if t < 0 {
		hi -= p.mul // uint64(t) is t+2^64: take the extra mul·2^64 back out
	}
	return hi, lo
}

// clock returns the token clock at t nanoseconds, floor(t·mul / 2^shift)
// units, modulo 2^64.
func (p *params) clock(t int64) uint64 {
	hi, lo := p.product(t)
	if p.shift >= 64 {
		return uint64(int64(hi) >> (p.shift - 64))
	}
	return hi<<(64-p.shift) | lo>>p.shift
}

// full returns the state of a bucket that is full at clock(t). Every full
// state is put fullSlack behind the clock, so that a full bucket, like an
// absent key of a Table, also reads full at earlier times.
func (p *params) full(t int64) uint64 { return p.clock(t) - fullSlack }

// debt returns how many units short of full a bucket in state tat is at
// clock value v: negative or zero when full, above tol only when v is
// earlier than a state the bucket has already been through.
func debt(tat, v uint64) int64 { return int64(tat - v) }

// units returns n tokens in units, for n in [0, Burst], or a charge's n
// up to maxShortTokens.
func (p *params) units(n int64) uint64 { return uint64(n) * p.one }

// take returns the state after taking n tokens at clock value v and whether
// they were there; when they were not, the state is returned unchanged. n is
// in [1, Burst].
func (p *params) take(tat, v uint64, n int64) (uint64, bool) {
	from, d := tat, debt(tat, v)
	if d < 0 { // full: count from now
		from, d = v, 0
	}
	u := p.units(n)
	if u == 0 || uint64(d)+u > p.tol { // u is 0 only for the zero params
		return tat, false
	}
	return from + u, true
}

// maxShortTokens is the most tokens a charge may leave a bucket short.
func (p *params) maxShortTokens() int64 {
	if p.one == 0 {
		return 0
	}
	return int64(maxShort / p.one)
}

// charge returns the state after charging n tokens at clock value v,
// whatever the bucket holds, or an error for a negative n or one that
// would leave it more than maxShort units short.
func (p *params) charge(tat, v uint64, n int64) (uint64, error) {
	if n < 0 {
		return tat, fmt.Errorf("local: %w: charge %d", hybridlimit.ErrInvalidCost, n)
	}
	if err := p.checkCharge(n); err != nil {
		return tat, err
	}
	from, d := tat, debt(tat, v)
	if d < 0 { // full: count from now
		from, d = v, 0
	}
	if n == 0 {
		return tat, nil
	}
	if uint64(d)+p.units(n) > maxShort {
		return tat, p.tooDeep(n)
	}
	return from + p.units(n), nil
}

// checkCharge refuses a charge no bucket of the limit could take: negative,
// or more than maxShortTokens.
func (p *params) checkCharge(n int64) error {
	switch {
	case n < 0:
		return fmt.Errorf("local: %w: charge %d", hybridlimit.ErrInvalidCost, n)
	case n > 0 && (p.one == 0 || n > p.maxShortTokens()):
		return p.tooDeep(n)
	}
	return nil
}

func (p *params) tooDeep(n int64) error {
	return fmt.Errorf("local: %w: charge %d would leave %v more than %d tokens short",
		hybridlimit.ErrInvalidCost, n, p.limit, p.maxShortTokens())
}

// short returns the whole tokens state tat lacks at clock value v, rounded
// up: Burst less the tokens it holds, and its debt beyond that.
func (p *params) short(tat, v uint64) int64 {
	d := debt(tat, v)
	if d <= 0 || p.one == 0 {
		return 0
	}
	return int64((uint64(d) + p.one - 1) / p.one)
}

// charged is result after a charge: allowed, with the wait for one token
// when none is left.
func (p *params) charged(tat uint64, t int64, v uint64) hybridlimit.Result {
	r := p.result(tat, t, v, 1, true)
	if d := uint64(max(0, debt(tat, v))); d+p.one > p.tol {
		r.RetryAfter = p.wait(t, d+p.one-p.tol)
	}
	return r
}

// tokens returns the whole tokens held in state tat at clock value v.
func (p *params) tokens(tat, v uint64) int64 {
	d := debt(tat, v)
	switch {
	case d <= 0:
		return p.limit.Burst
	case uint64(d) >= p.tol:
		return 0
	}
	return int64((p.tol - uint64(d)) / p.one)
}

// add returns the state after giving n ≥ 1 tokens back at clock value v,
// capped at a full bucket.
func (p *params) add(tat, v uint64, n int64) uint64 {
	d := debt(tat, v)
	if d <= 0 || p.one == 0 {
		return tat
	}
	if uint64(n) < (uint64(d)+p.one-1)/p.one { // n·one < d, without overflow
		return tat - p.units(n)
	}
	return v - fullSlack
}

// set returns the state of a bucket holding tokens at clock value v, clamped
// to [0, Burst].
func (p *params) set(v uint64, tokens int64) uint64 {
	if tokens >= p.limit.Burst {
		return v - fullSlack
	}
	return v + p.tol - p.units(max(0, tokens))
}

// convert returns the state under to of a bucket in state tat under from at
// t: the tokens it holds at t under from, in whole units of from, are kept,
// in units of to rounded down and cut to to's burst, so that a raised limit
// refills at once from what the bucket held and a lowered one clamps. A
// full bucket stays full, as forgetting it (Table does) must change
// nothing. A
// bucket short of more than its burst at t (t is before a state it has been
// through) is converted at the instant it held nothing, later than t, as an
// empty bucket: converting at t would hand it a refill it never waited for.
// That instant is kept at most maxShort units of to ahead of t, so a wait of
// years at a slow rate cannot wrap a fast clock to a full bucket.
func convert(from, to *params, tat uint64, t int64) uint64 {
	d := debt(tat, from.clock(t))
	switch {
	case d <= 0:
		return to.full(t)
	case uint64(d) >= from.tol:
		w := min(from.wait(t, uint64(d)-from.tol), to.wait(t, maxShort-to.tol))
		if t > math.MaxInt64-int64(w) {
			return to.clock(math.MaxInt64) + to.tol
		}
		return to.clock(t+int64(w)) + to.tol
	}
	held := from.tol - uint64(d) // units of from, below from.tol
	// held·to.one/from.one tokens' worth of units of to, unless that is the
	// whole new burst: held ≥ to.Burst·from.one, compared in 128 bits.
	if hi, lo := bits.Mul64(uint64(to.limit.Burst), from.one); hi == 0 && held >= lo {
		return to.full(t)
	}
	// held < to.Burst·from.one, so the quotient is below to.tol < 2^62.
	hi, lo := bits.Mul64(held, to.one)
	units, _ := bits.Div64(hi, lo, from.one)
	return to.clock(t) + to.tol - units
}

// checkCost validates a cost against the limit.
func (p *params) checkCost(n int64) error {
	if err := p.limit.CheckCost(n); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	return nil
}

// result describes state tat at time t (clock value v) after a decision for
// n tokens: allowed says whether they were taken (or, for a peek, could be).
func (p *params) result(tat uint64, t int64, v uint64, n int64, allowed bool) hybridlimit.Result {
	r := hybridlimit.Result{Limit: p.limit, Allowed: allowed, Remaining: p.tokens(tat, v)}
	d := uint64(max(0, debt(tat, v)))
	if !allowed {
		r.RetryAfter = p.wait(t, d+p.units(n)-p.tol)
	}
	r.ResetAfter = p.wait(t, d)
	return r
}

// taken is result for a decision that took its tokens, leaving state tat at
// clock value v, whose debt is then in (0, tol]. It is result without the
// branches, small enough to inline into the decision paths.
func (p *params) taken(tat uint64, t int64, v uint64) hybridlimit.Result {
	d := tat - v
	r := hybridlimit.Result{Limit: p.limit, Allowed: true, Remaining: int64((p.tol - d) / p.one)}
	if r.ResetAfter = time.Duration(d); p.perNs != 1 { // d ≤ tol < 2^61
		r.ResetAfter = p.waitLong(t, d)
	}
	return r
}

// wait returns the least w ≥ 0 such that the token clock advances by at
// least d units from t to t+w, saturating at maxDuration.
func (p *params) wait(t int64, d uint64) time.Duration {
	if p.perNs == 1 && d < math.MaxInt64 { // a unit is a nanosecond: most limits
		return time.Duration(d)
	}
	return p.waitLong(t, d)
}

// waitLong is wait for the other cases, kept apart so that wait inlines:
// every instruction on the decision path counts when a Table of a million
// keys waits on memory.
func (p *params) waitLong(t int64, d uint64) time.Duration {
	switch {
	case d == 0:
		return 0
	case p.perNs != 0: // the exact case: the clock is t·perNs
		if d >= math.MaxInt64 {
			return maxDuration
		}
		return time.Duration((d + uint64(p.perNs) - 1) / uint64(p.perNs))
	}
	shift := uint(p.shift)
	if p.mul == 0 || uint(bits.Len64(d))+shift > 127 {
		return maxDuration
	}
	// clock(t+w) = floor((P + w·mul) / 2^shift) with P = t·mul, and
	// clock(t) = (P - rem) / 2^shift with rem = P mod 2^shift, so the clock
	// has advanced by d once w·mul ≥ d·2^shift - rem.
	hi, lo := p.product(t)
	var remHi, remLo, dHi, dLo uint64
	if shift >= 64 {
		remHi, remLo = hi&(1<<(shift-64)-1), lo
		dHi = d << (shift - 64)
	} else {
		remLo = lo & (1<<shift - 1)
		dHi, dLo = d>>(64-shift), d<<shift
	}
	needLo, borrow := bits.Sub64(dLo, remLo, 0)
	needHi, _ := bits.Sub64(dHi, remHi, borrow)
	if needHi >= p.mul {
		return maxDuration
	}
	w, rem := bits.Div64(needHi, needLo, p.mul)
	if w >= math.MaxInt64 {
		return maxDuration
	}
	// Round up without a branch on rem: that branch cannot be predicted and
	// resolves late, after the division, and each misprediction throws away
	// the next call's memory accesses already under way, costing hundreds
	// of nanoseconds per decision on a Table of a million keys.
	return time.Duration(w + (rem|-rem)>>63)
}
