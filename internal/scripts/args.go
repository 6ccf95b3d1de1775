package scripts

import (
	"errors"
	"math/bits"
	"strconv"
)

// maxExact is 2^53: integers up to it are exact in a Lua number.
const maxExact = 1 << 53

// maxWide is 2^50: the scripts' mul_div (wide.lua) is exact for
// divisors and quotients below it, so a period, a burst, a rate and the
// time an empty bucket takes to fill must be below it.
const maxWide = 1 << 50

// MaxNow bounds a caller's time, in microseconds since the Unix epoch (a
// little after the year 2219): the scripts add durations below 2^50 to it,
// and the sum must stay below 2^53 to be exact.
const MaxNow = maxExact - maxWide

// Params are the numbers of one rate-limiting decision, in the units the
// scripts use. The caller validates them (see hybridlimit.Limit.Validate):
// every field but Now must be at least 1, Cost at most Burst but in a
// Charge, where it is at most MaxCharge.
type Params struct {
	// Now is the time in microseconds since the Unix epoch, or 0 for Redis
	// TIME.
	Now int64
	// Rate is the number of tokens added per period (token bucket, GCRA).
	Rate int64
	// PeriodUS is the period, or window length, in microseconds.
	PeriodUS int64
	// Burst is the bucket capacity (token bucket, GCRA) or the cost a
	// window admits (window algorithms).
	Burst int64
	// Cost is the cost of this request, or of the refund.
	Cost int64
	// Mode says what the script does: Spend (the zero value), Peek,
	// Refund or Charge.
	Mode Mode
}

// Mode is what a limiter script does with a cost.
type Mode int

// The modes, as the scripts' mode argument spells them.
const (
	// Spend decides, and spends the cost if admitted.
	Spend Mode = iota
	// Peek decides and writes nothing.
	Peek
	// Refund gives the cost back, as far as the state allows.
	Refund
	// Charge spends the cost whatever the state holds, for usage known
	// only after the fact: a bucket goes into debt, a window counts past
	// its quota. The cost may exceed Burst; the script refuses, writing
	// nothing, a charge that would take the state past what it can
	// represent exactly (DecodeCharge's ErrChargeTooDeep).
	Charge
)

// MaxCharge bounds a Charge's cost, and what a window counts: 2^50 - 1,
// below which the scripts' sums and products stay exact.
const MaxCharge = maxWide - 1

// ErrParams is returned for parameters a script cannot represent exactly.
var ErrParams = errors.New("scripts: parameters out of range")

func (p Params) check() error {
	maxCost := p.Burst
	if p.Mode == Charge {
		maxCost = MaxCharge
	}
	if p.Mode < Spend || p.Mode > Charge || p.Now < 0 || p.Now >= MaxNow || p.PeriodUS < 1 || p.PeriodUS >= maxWide ||
		p.Burst < 1 || p.Burst >= maxWide || p.Cost < 1 || p.Cost > maxCost {
		return ErrParams
	}
	return nil
}

// checkRefill refuses a bucket whose refill times a script cannot compute
// exactly: the time to fill from empty, and a charge's time to refill,
// must be below 2^50 microseconds.
func (p Params) checkRefill() error {
	if p.Rate < 1 || p.Rate >= maxWide {
		return ErrParams
	}
	if _, _, ok := mulDiv(p.Burst, p.PeriodUS, p.Rate); !ok {
		return ErrParams
	}
	if p.Mode == Charge {
		if _, _, ok := mulDiv(p.Cost, p.PeriodUS, p.Rate); !ok {
			return ErrParams
		}
	}
	return nil
}

// TokenBucketArgs returns ARGV for TokenBucket.
func (p Params) TokenBucketArgs() ([]any, error) {
	if p.check() != nil || p.checkRefill() != nil {
		return nil, ErrParams
	}
	return []any{p.Now, p.Rate, p.PeriodUS, p.Burst, p.Cost, int64(p.Mode)}, nil
}

// GCRAArgs returns ARGV for GCRA: the time, the limit as one text
// "rate period_us burst", the cost and the mode. The script keeps the
// limit's text beside the state and compares the two as strings, so the
// usual call, under the limit that wrote the state, converts no more text
// to numbers than it must.
func (p Params) GCRAArgs() ([]any, error) {
	if p.check() != nil || p.checkRefill() != nil {
		return nil, ErrParams
	}
	var b [3*20 + 2]byte
	lim := strconv.AppendInt(b[:0], p.Rate, 10)
	lim = append(lim, ' ')
	lim = strconv.AppendInt(lim, p.PeriodUS, 10)
	lim = append(lim, ' ')
	lim = strconv.AppendInt(lim, p.Burst, 10)
	return []any{p.Now, string(lim), p.Cost, int64(p.Mode)}, nil
}

// WindowArgs returns ARGV for FixedWindow, SlidingWindow and SlidingLog,
// which ignore Rate.
func (p Params) WindowArgs() ([]any, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return []any{p.Now, p.PeriodUS, p.Burst, p.Cost, int64(p.Mode)}, nil
}

// ConcurrencyArgs returns ARGV for ConcurrencyAcquire: at most maxHeld leases
// of ttlUS microseconds each, the new one named id.
func ConcurrencyArgs(now, maxHeld, ttlUS int64, id string, peek bool) ([]any, error) {
	if now < 0 || now >= MaxNow || maxHeld < 1 || maxHeld >= maxExact || ttlUS < 1 || ttlUS >= maxWide || id == "" {
		return nil, ErrParams
	}
	mode := Spend
	if peek {
		mode = Peek
	}
	return []any{now, maxHeld, ttlUS, id, int64(mode)}, nil
}

// ReleaseArgs returns ARGV for ConcurrencyRelease.
func ReleaseArgs(now int64, id string) ([]any, error) {
	if now < 0 || now >= MaxNow || id == "" {
		return nil, ErrParams
	}
	return []any{now, id}, nil
}

// mulDiv returns q, r with a*b = q*d + r, 0 <= r < d, and ok when q is below
// 2^50 (maxWide), so the script's mul_div can work with it exactly. a, b >= 0,
// d >= 1.
func mulDiv(a, b, d int64) (q, r int64, ok bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(d) { // the quotient would not fit 64 bits
		return 0, 0, false
	}
	uq, ur := bits.Div64(hi, lo, uint64(d))
	if uq >= maxWide {
		return 0, 0, false
	}
	return int64(uq), int64(ur), true
}
