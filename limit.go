package hybridlimit

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"
)

// Bounds on a Limit. They keep every quantity exact in the float64 arithmetic
// of Redis Lua (integers below 2^50, whose products the scripts divide
// exactly) and keep every TTL finite and sane.
const (
	// MaxQuantity bounds Rate, Burst and any single cost.
	MaxQuantity = 1 << 40
	// MinPeriod is the shortest period: Redis TIME has microsecond
	// resolution, and sub-millisecond windows are noise on a network.
	MinPeriod = time.Millisecond
	// MaxRefill bounds the time an empty bucket takes to fill (Burst tokens at
	// Rate per Period), which is also the longest TTL any limiter key gets.
	MaxRefill = 366 * 24 * time.Hour
)

// Limit is a rate limit: Rate tokens per Period, with at most Burst tokens
// spendable at once. For window algorithms Burst is the number of requests a
// window admits and Rate/Period only sets the refill of token-style limiters;
// the constructors make Burst equal to Rate, which is what "100 per minute"
// means to most people.
//
// The zero Limit is invalid: a limiter given it returns an error rather than
// admitting everything or nothing. Use Validate to check a Limit built by hand.
type Limit struct {
	// Rate is the number of tokens added every Period. At least 1.
	Rate int64
	// Period is the time over which Rate tokens are added. At least MinPeriod.
	Period time.Duration
	// Burst is the largest number of tokens that can be held, and so the
	// largest cost a single decision can ask for. At least 1.
	Burst int64
}

// PerSecond returns a limit of n per second with a burst of n.
func PerSecond(n int64) Limit { return Limit{Rate: n, Period: time.Second, Burst: n} }

// PerMinute returns a limit of n per minute with a burst of n.
func PerMinute(n int64) Limit { return Limit{Rate: n, Period: time.Minute, Burst: n} }

// PerHour returns a limit of n per hour with a burst of n.
func PerHour(n int64) Limit { return Limit{Rate: n, Period: time.Hour, Burst: n} }

// Every returns a limit of one token every interval with the given burst:
// Every(100*time.Millisecond, 5) is ten per second, five at once.
func Every(interval time.Duration, burst int64) Limit {
	return Limit{Rate: 1, Period: interval, Burst: burst}
}

// WithBurst returns a copy of l with Burst set to b.
func (l Limit) WithBurst(b int64) Limit {
	l.Burst = b
	return l
}

// ErrInvalidLimit is wrapped by every error Validate returns.
var ErrInvalidLimit = errors.New("hybridlimit: invalid limit")

// Validate reports whether l can be enforced. It rejects zero and negative
// values, quantities above MaxQuantity, periods below MinPeriod, and limits
// whose bucket would take longer than MaxRefill to fill.
func (l Limit) Validate() error {
	switch {
	case l.Rate < 1 || l.Rate > MaxQuantity:
		return fmt.Errorf("%w: rate %d is outside [1, %d]", ErrInvalidLimit, l.Rate, int64(MaxQuantity))
	case l.Burst < 1 || l.Burst > MaxQuantity:
		return fmt.Errorf("%w: burst %d is outside [1, %d]", ErrInvalidLimit, l.Burst, int64(MaxQuantity))
	case l.Period < MinPeriod:
		return fmt.Errorf("%w: period %v is shorter than %v", ErrInvalidLimit, l.Period, MinPeriod)
	case l.Period > MaxRefill:
		return fmt.Errorf("%w: period %v is longer than %v", ErrInvalidLimit, l.Period, MaxRefill)
	case l.Refill() > MaxRefill:
		return fmt.Errorf("%w: refilling %d tokens at %d per %v takes longer than %v", ErrInvalidLimit, l.Burst, l.Rate, l.Period, MaxRefill)
	}
	return nil
}

// Interval is the time one token takes to arrive (Period / Rate), in
// nanoseconds, as a float so that 3 per second is exact enough.
func (l Limit) Interval() float64 { return float64(l.Period) / float64(l.Rate) }

// Refill is the time an empty bucket takes to hold Burst tokens again,
// ceil(Burst x Period / Rate) exactly, so that Validate's MaxRefill bound
// is exact at its edge. It saturates instead of overflowing for limits
// that Validate rejects.
func (l Limit) Refill() time.Duration {
	if l.Rate <= 0 {
		return time.Duration(math.MaxInt64)
	}
	if l.Burst > 0 && l.Period > 0 {
		hi, lo := bits.Mul64(uint64(l.Burst), uint64(l.Period))
		if hi >= uint64(l.Rate) { // a quotient of 64 bits or more
			return time.Duration(math.MaxInt64)
		}
		q, r := bits.Div64(hi, lo, uint64(l.Rate))
		if r > 0 {
			q++
		}
		if q > math.MaxInt64 {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(q)
	}
	d := float64(l.Burst) * l.Interval()
	if d >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Ceil(d))
}

// TokensIn returns the tokens added over d, a float because a limit of 3 per
// second adds 0.3 tokens in 100ms.
func (l Limit) TokensIn(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(d) / l.Interval()
}

// String renders the limit as "100/1m0s burst 100", or "100/s" style for the
// named periods when burst equals rate.
func (l Limit) String() string {
	var per string
	switch l.Period {
	case time.Second:
		per = "s"
	case time.Minute:
		per = "min"
	case time.Hour:
		per = "h"
	default:
		per = l.Period.String()
	}
	s := strconv.FormatInt(l.Rate, 10) + "/" + per
	if l.Burst != l.Rate {
		s += " burst " + strconv.FormatInt(l.Burst, 10)
	}
	return s
}

// CheckCost validates a cost (the number of tokens one decision asks for)
// against l: it must be at least 1 and at most l.Burst, since a cost above the
// burst could never be admitted.
func (l Limit) CheckCost(cost int64) error {
	switch {
	case cost < 1:
		return fmt.Errorf("%w: %d", ErrInvalidCost, cost)
	case cost > l.Burst:
		return fmt.Errorf("%w: cost %d > burst %d", ErrCostExceedsBurst, cost, l.Burst)
	}
	return nil
}
