package local

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// The virtual time grid: gridLimit adds one token every tick, so t3 is the
// instant the third token after t0 arrives.
const tick = 100 * time.Millisecond

var gridLimit = hybridlimit.Limit{Rate: 10, Period: time.Second, Burst: 3}

// subject is a bucket under test, driven by offsets from a virtual t0. Core,
// Bucket and one key of a Table all implement it, so every variant runs the
// same grid cases.
type subject interface {
	take(at time.Duration, n int64) (hybridlimit.Result, error)
	peek(at time.Duration, n int64) (hybridlimit.Result, error)
	tokens(at time.Duration) int64
	add(at time.Duration, n int64)
	set(at time.Duration, tokens int64)
}

type op int

const (
	take op = iota
	peek
	tokens
	add
	set
)

const (
	no  = 0
	yes = 1
)

// step is one call at grid time t<at>. For take and peek, want is yes or no
// (Allowed); for tokens it is the count; add and set check nothing.
type step struct {
	op   op
	at   int
	n    int64
	want int64
}

// gridCase is a sequence of calls on a fresh bucket of gridLimit.
type gridCase struct {
	name  string
	steps []step
}

var gridCases = []gridCase{
	{"burst is admitted at one instant, exactly", []step{
		{take, 0, 1, yes}, {take, 0, 1, yes}, {take, 0, 1, yes}, {take, 0, 1, no}, {tokens, 0, 0, 0},
	}},
	{"one token arrives every tick", []step{
		{take, 0, 3, yes}, {take, 0, 1, no}, {take, 1, 1, yes}, {take, 1, 1, no},
		{tokens, 3, 0, 2}, {take, 3, 2, yes}, {take, 3, 1, no},
	}},
	{"a weighted cost waits for all its tokens", []step{
		{take, 0, 3, yes}, {take, 1, 2, no}, {tokens, 1, 0, 1}, {take, 2, 2, yes}, {tokens, 2, 0, 0},
	}},
	{"refill stops at burst", []step{
		{take, 0, 3, yes}, {tokens, 9, 0, 3}, {take, 9, 3, yes}, {take, 9, 1, no},
	}},
	{"a denied call spends nothing", []step{
		{take, 0, 2, yes}, {take, 0, 2, no}, {take, 0, 2, no}, {take, 0, 1, yes},
	}},
	{"an earlier time sees fewer tokens, never more", []step{
		{take, 5, 1, yes}, {tokens, 5, 0, 2}, {tokens, 4, 0, 1}, {tokens, 3, 0, 0},
		{take, 3, 1, no}, {take, 5, 2, yes}, {take, 5, 1, no},
	}},
	{"a later time does not unlock an earlier one", []step{
		{take, 9, 3, yes}, {take, 0, 1, no}, {tokens, 0, 0, 0}, {take, 9, 1, no}, {take, 8, 1, no}, {take, 10, 1, yes},
	}},
	{"add refunds, capped at burst", []step{
		{take, 0, 3, yes}, {add, 0, 2, 0}, {tokens, 0, 0, 2}, {add, 0, 5, 0}, {tokens, 0, 0, 3},
		{take, 0, 3, yes}, {take, 0, 1, no},
	}},
	{"add to a full bucket does nothing", []step{
		{add, 0, 5, 0}, {tokens, 0, 0, 3}, {take, 0, 3, yes}, {take, 0, 1, no},
	}},
	{"add below 1 does nothing", []step{
		{take, 0, 3, yes}, {add, 0, 0, 0}, {add, 0, -5, 0}, {tokens, 0, 0, 0},
	}},
	{"set replaces the tokens, clamped", []step{
		{set, 0, 1, 0}, {tokens, 0, 0, 1}, {take, 0, 1, yes}, {take, 0, 1, no},
		{set, 1, 9, 0}, {tokens, 1, 0, 3}, {set, 1, -4, 0}, {take, 1, 1, no}, {tokens, 2, 0, 1},
	}},
	{"peek spends nothing", []step{
		{peek, 0, 3, yes}, {peek, 0, 3, yes}, {take, 0, 2, yes}, {peek, 0, 2, no}, {peek, 0, 1, yes},
		{tokens, 0, 0, 1}, {peek, 1, 2, yes},
	}},
}

// run plays steps on s and reports every mismatch as Call(t<i>, n) = got,
// want w.
func run(t *testing.T, s subject, steps []step) {
	t.Helper()
	for _, st := range steps {
		at := time.Duration(st.at) * tick
		switch st.op {
		case take, peek:
			name, call := "Take", s.take
			if st.op == peek {
				name, call = "Peek", s.peek
			}
			r, err := call(at, st.n)
			if err != nil {
				t.Fatalf("%s(t%d, %d) error: %v", name, st.at, st.n, err)
			}
			if r.Allowed != (st.want == yes) {
				t.Errorf("%s(t%d, %d) = %v, want %v", name, st.at, st.n, r.Allowed, st.want == yes)
			}
		case tokens:
			if got := s.tokens(at); got != st.want {
				t.Errorf("Tokens(t%d) = %d, want %d", st.at, got, st.want)
			}
		case add:
			s.add(at, st.n)
		case set:
			s.set(at, st.n)
		}
	}
}

// coreSubject drives a Core with t0 at 0.
type coreSubject struct{ c Core }

func (s *coreSubject) take(at time.Duration, n int64) (hybridlimit.Result, error) {
	return s.c.Take(int64(at), n)
}

func (s *coreSubject) peek(at time.Duration, n int64) (hybridlimit.Result, error) {
	return s.c.Peek(int64(at), n)
}
func (s *coreSubject) tokens(at time.Duration) int64 { return s.c.Tokens(int64(at)) }
func (s *coreSubject) add(at time.Duration, n int64) { s.c.Add(int64(at), n) }
func (s *coreSubject) set(at time.Duration, k int64) { s.c.Set(int64(at), k) }

func mustCore(t testing.TB, l hybridlimit.Limit, now int64) Core {
	t.Helper()
	c, err := NewCore(l, now)
	if err != nil {
		t.Fatalf("NewCore(%v, %d): %v", l, now, err)
	}
	return c
}

func TestCoreGrid(t *testing.T) {
	for _, tc := range gridCases {
		t.Run(tc.name, func(t *testing.T) {
			run(t, &coreSubject{mustCore(t, gridLimit, 0)}, tc.steps)
		})
	}
}

func TestCoreResult(t *testing.T) {
	l := gridLimit
	tests := []struct {
		name  string
		spend int64 // taken at t0 first
		at    time.Duration
		n     int64
		want  hybridlimit.Result
	}{
		{"full", 0, 0, 1, hybridlimit.Result{Limit: l, Allowed: true, Remaining: 2, ResetAfter: tick}},
		{"last token", 2, 0, 1, hybridlimit.Result{Limit: l, Allowed: true, Remaining: 0, ResetAfter: 3 * tick}},
		{"denied", 3, 0, 1, hybridlimit.Result{Limit: l, Remaining: 0, RetryAfter: tick, ResetAfter: 3 * tick}},
		{"denied, weighted", 3, 0, 3, hybridlimit.Result{Limit: l, Remaining: 0, RetryAfter: 3 * tick, ResetAfter: 3 * tick}},
		{"denied mid-tick", 3, tick / 4, 2, hybridlimit.Result{Limit: l, Remaining: 0, RetryAfter: 2*tick - tick/4, ResetAfter: 3*tick - tick/4}},
		{"refilled", 3, 3 * tick, 3, hybridlimit.Result{Limit: l, Allowed: true, Remaining: 0, ResetAfter: 3 * tick}},
		{"earlier than the spend", 1, -tick, 1, hybridlimit.Result{Limit: l, Allowed: true, Remaining: 0, ResetAfter: 3 * tick}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const t0 = int64(time.Hour) // keep every time ≥ 0, where arrivals are exact
			c := mustCore(t, l, t0)
			if tt.spend > 0 {
				if r, _ := c.Take(t0, tt.spend); !r.Allowed {
					t.Fatalf("Take(t0, %d) = false, want true", tt.spend)
				}
			}
			got, err := c.Take(t0+int64(tt.at), tt.n)
			if err != nil || got != tt.want {
				t.Errorf("Take(%v, %d) = %+v, %v; want %+v", tt.at, tt.n, got, err, tt.want)
			}
		})
	}
}

// TestCoreInexactInterval checks a limit whose interval is not a whole number
// of nanoseconds: 3 per second adds a token every 333,333,333⅓ns, so token k
// arrives at ceil(k·10^9/3).
func TestCoreInexactInterval(t *testing.T) {
	c := mustCore(t, hybridlimit.Limit{Rate: 3, Period: time.Second, Burst: 3}, 0)
	if r, _ := c.Take(0, 3); !r.Allowed {
		t.Fatal("Take(0, 3) = false, want true")
	}
	for k := int64(1); k <= 3000; k++ {
		due := (k*int64(time.Second) + 2) / 3
		if got := c.Tokens(due - 1); got != 0 {
			t.Fatalf("Tokens(%d) = %d, want 0 (token %d is due at %d)", due-1, got, k, due)
		}
		if r, _ := c.Take(due, 1); !r.Allowed {
			t.Fatalf("Take(%d, 1) = false, want true (token %d)", due, k)
		}
	}
}

// TestCoreExactBurst checks, for limits across the whole valid range, that
// a full bucket admits exactly Burst at one instant, in single tokens and
// all at once.
func TestCoreExactBurst(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		l := randomLimit(rng)
		now := rng.Int64N(1<<62) - 1<<61
		c := mustCore(t, l, now)
		if r, _ := c.Take(now, l.Burst); !r.Allowed || r.Remaining != 0 {
			t.Fatalf("%v: Take(now, burst) = %+v, want allowed with 0 remaining", l, r)
		}
		if r, _ := c.Take(now, 1); r.Allowed {
			t.Fatalf("%v: Take(now, 1) after the burst = true, want false", l)
		}
		if l.Burst > 1000 {
			continue
		}
		c = mustCore(t, l, now)
		for i := range l.Burst {
			if r, _ := c.Take(now, 1); !r.Allowed || r.Remaining != l.Burst-i-1 {
				t.Fatalf("%v: Take #%d = %+v, want allowed with %d remaining", l, i, r, l.Burst-i-1)
			}
		}
		if r, _ := c.Take(now, 1); r.Allowed {
			t.Fatalf("%v: Take(now, 1) after %d single takes = true, want false", l, l.Burst)
		}
	}
}

// randomLimit returns a valid limit spread over the whole range Validate
// accepts, extremes included.
func randomLimit(rng *rand.Rand) hybridlimit.Limit {
	for {
		l := hybridlimit.Limit{
			Rate:   logUniform(rng, 1, hybridlimit.MaxQuantity),
			Period: time.Duration(logUniform(rng, int64(hybridlimit.MinPeriod), int64(hybridlimit.MaxRefill))),
			Burst:  logUniform(rng, 1, hybridlimit.MaxQuantity),
		}
		switch rng.IntN(8) {
		case 0:
			l.Rate = hybridlimit.MaxQuantity
		case 1:
			l.Period = hybridlimit.MinPeriod
		case 2:
			l.Period = hybridlimit.MaxRefill
		case 3:
			l.Rate, l.Burst = 1, 1
		case 4: // the exact case: Rate/gcd(Rate, Period) small
			l.Rate = 1 + rng.Int64N(maxExactRate)
		case 5:
			l.Period = time.Duration(l.Rate * (1 + rng.Int64N(int64(hybridlimit.MaxRefill)/l.Rate)))
		}
		if l.Validate() == nil {
			return l
		}
	}
}

func logUniform(rng *rand.Rand, lo, hi int64) int64 {
	v := int64(math.Exp(math.Log(float64(lo)) + rng.Float64()*(math.Log(float64(hi))-math.Log(float64(lo)))))
	return max(lo, min(hi, v))
}

// TestParamsClock checks the fixed-point token clock against exact integer
// arithmetic, floor(t·one·Rate/Period) units, for limits across the
// valid range. While the count stays below 2^62 units the clock is exact for
// t ≥ 0, except that a unit due strictly between two nanoseconds may arrive
// at the earlier one; before 0 it may be one unit behind. Anywhere on the
// non-negative axis, the units added between two times within 2^61 units of
// each other are exact to within two (the rounding of mul shifts the clock
// by a slowly growing fraction, and each floor can add one).
func TestParamsClock(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	exact := func(l hybridlimit.Limit, x int64) *big.Int {
		p, _ := newParams(l)
		e := new(big.Int).Mul(big.NewInt(x), new(big.Int).Mul(big.NewInt(l.Rate), new(big.Int).SetUint64(p.one)))
		return e.Div(e, big.NewInt(int64(l.Period))) // Euclidean: floor for a positive divisor
	}
	for range 20000 {
		l := randomLimit(rng)
		p, err := newParams(l)
		if err != nil {
			t.Fatal(err)
		}
		if p.mul < 1<<63 || p.shift < 26 || p.shift > 118 || p.one == 0 || p.tol != uint64(l.Burst)*p.one || p.tol > 1<<60 {
			t.Fatalf("%v: mul %#x shift %d out of range", l, p.mul, p.shift)
		}
		// Absolute values, within 2^62 tokens of 0.
		span := new(big.Int).Lsh(big.NewInt(1), 62)
		span.Mul(span, big.NewInt(int64(l.Period))).Quo(span, new(big.Int).Mul(big.NewInt(l.Rate), new(big.Int).SetUint64(p.one)))
		if !span.IsInt64() {
			span.SetInt64(math.MaxInt64)
		}
		x := rng.Int64N(span.Int64()) >> rng.IntN(64)
		if rng.IntN(2) == 0 {
			x = -x
		}
		want := exact(l, x)
		got := int64(p.clock(x))
		diff := got - want.Int64()
		exactCase := l.Rate/int64(gcd(uint64(l.Rate), uint64(l.Period))) <= maxExactRate
		switch {
		case exactCase && diff != 0:
			t.Fatalf("%v: clock(%d) = %d, want %v (no rounding)", l, x, got, want)
		case x >= 0 && diff == 1:
			// Allowed only for a token due strictly between x and x+1.
			due := new(big.Int).Mul(big.NewInt(got), big.NewInt(int64(l.Period)))
			next := new(big.Int).Mul(big.NewInt(x+1), new(big.Int).Mul(big.NewInt(l.Rate), new(big.Int).SetUint64(p.one)))
			if due.Cmp(next) >= 0 {
				t.Fatalf("%v: clock(%d) = %d, want %v", l, x, got, want)
			}
		case x >= 0 && diff != 0, x < 0 && diff != 0 && diff != -1:
			t.Fatalf("%v: clock(%d) = %d, want %v", l, x, got, want)
		}
		// Differences, anywhere on the non-negative axis.
		x1 := int64(rng.Uint64() >> 1)
		d := rng.Int64N(span.Int64()/2 + 1)
		if x1 > math.MaxInt64-d {
			x1 -= d
		}
		x2 := x1 + d
		wantD := new(big.Int).Sub(exact(l, x2), exact(l, x1))
		gotD := int64(p.clock(x2) - p.clock(x1))
		if e := gotD - wantD.Int64(); e < -2 || e > 2 || exactCase && e != 0 {
			t.Fatalf("%v: clock(%d) - clock(%d) = %d, want %v", l, x2, x1, gotD, wantD)
		}
	}
}

// TestParamsWait checks that wait(t, d) is the least wait after which the
// token clock has advanced by d.
func TestParamsWait(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		l := randomLimit(rng)
		p, _ := newParams(l)
		x := rng.Int64N(1<<62) - 1<<61
		d := uint64(logUniform(rng, 1, int64(2*p.tol)))
		w := p.wait(x, d)
		if w == maxDuration {
			continue
		}
		if w < 0 || x+int64(w) < x {
			t.Fatalf("%v: wait(%d, %d) = %d overflows", l, x, d, w)
		}
		if got := p.clock(x+int64(w)) - p.clock(x); got < d {
			t.Fatalf("%v: wait(%d, %d) = %d, but the clock advanced only %d", l, x, d, w, got)
		}
		if w > 0 {
			if got := p.clock(x+int64(w)-1) - p.clock(x); got >= d {
				t.Fatalf("%v: wait(%d, %d) = %d, but %d was enough", l, x, d, w, w-1)
			}
		}
	}
	// Waits beyond a Duration saturate.
	p, _ := newParams(hybridlimit.Limit{Rate: 1, Period: hybridlimit.MaxRefill, Burst: 1})
	if got := p.wait(0, math.MaxUint64); got != maxDuration {
		t.Errorf("wait(0, 2^64-1) at 1 per %v = %v, want %v", hybridlimit.MaxRefill, got, maxDuration)
	}
	if got := p.wait(0, p.tol); got != hybridlimit.MaxRefill {
		t.Errorf("wait(0, tol) at 1 per %v = %v, want %v", hybridlimit.MaxRefill, got, hybridlimit.MaxRefill)
	}
	if got := (&params{}).wait(0, 1); got != maxDuration {
		t.Errorf("zero params: wait(0, 1) = %v, want %v", got, maxDuration)
	}
}

// badLimits are limits every constructor and every call must reject with an
// error wrapping hybridlimit.ErrInvalidLimit.
var badLimits = []hybridlimit.Limit{
	{},
	{Rate: 0, Period: time.Second, Burst: 1},
	{Rate: -1, Period: time.Second, Burst: 1},
	{Rate: math.MinInt64, Period: time.Second, Burst: 1},
	{Rate: math.MaxInt64, Period: time.Second, Burst: 1},
	{Rate: hybridlimit.MaxQuantity + 1, Period: time.Second, Burst: 1},
	{Rate: 1, Period: 0, Burst: 1},
	{Rate: 1, Period: -time.Second, Burst: 1},
	{Rate: 1, Period: time.Microsecond, Burst: 1},
	{Rate: 1, Period: math.MaxInt64, Burst: 1},
	{Rate: 1, Period: time.Second, Burst: 0},
	{Rate: 1, Period: time.Second, Burst: -1},
	{Rate: 1, Period: time.Second, Burst: math.MaxInt64},
	{Rate: 1, Period: time.Hour, Burst: hybridlimit.MaxQuantity}, // refill takes 2^40 hours
}

// badCosts pairs costs with the error a bucket of gridLimit must give.
var badCosts = []struct {
	n    int64
	want error
}{
	{0, hybridlimit.ErrInvalidCost},
	{-1, hybridlimit.ErrInvalidCost},
	{math.MinInt64, hybridlimit.ErrInvalidCost},
	{gridLimit.Burst + 1, hybridlimit.ErrCostExceedsBurst},
	{math.MaxInt64, hybridlimit.ErrCostExceedsBurst},
}

func TestCoreBadInput(t *testing.T) {
	for _, l := range badLimits {
		if _, err := NewCore(l, 0); !errors.Is(err, hybridlimit.ErrInvalidLimit) {
			t.Errorf("NewCore(%+v) error = %v, want %v", l, err, hybridlimit.ErrInvalidLimit)
		}
		c := mustCore(t, gridLimit, 0)
		if err := c.SetLimit(0, l); !errors.Is(err, hybridlimit.ErrInvalidLimit) {
			t.Errorf("SetLimit(%+v) error = %v, want %v", l, err, hybridlimit.ErrInvalidLimit)
		}
		if c.Limit() != gridLimit || c.Tokens(0) != gridLimit.Burst {
			t.Errorf("SetLimit(%+v) changed the bucket", l)
		}
	}
	for _, bc := range badCosts {
		c := mustCore(t, gridLimit, 0)
		if _, err := c.Take(0, bc.n); !errors.Is(err, bc.want) {
			t.Errorf("Take(t0, %d) error = %v, want %v", bc.n, err, bc.want)
		}
		if _, err := c.Peek(0, bc.n); !errors.Is(err, bc.want) {
			t.Errorf("Peek(t0, %d) error = %v, want %v", bc.n, err, bc.want)
		}
		if got := c.Tokens(0); got != gridLimit.Burst {
			t.Errorf("Take(t0, %d) spent: Tokens(t0) = %d, want %d", bc.n, got, gridLimit.Burst)
		}
	}
	// Extreme times and counts are answered, not panicked on.
	c := mustCore(t, gridLimit, 0)
	for _, x := range []int64{math.MinInt64, -1, 0, math.MaxInt64} {
		c.Take(x, 1)
		c.Peek(x, 3)
		c.Add(x, math.MaxInt64)
		c.Set(x, math.MinInt64)
		c.Set(x, math.MaxInt64)
		if got := c.Tokens(x); got < 0 || got > gridLimit.Burst {
			t.Errorf("Tokens(%d) = %d, outside [0, %d]", x, got, gridLimit.Burst)
		}
	}
}

// TestCoreZero checks that the zero Core refuses everything without
// panicking.
func TestCoreZero(t *testing.T) {
	var c Core
	if _, err := c.Take(0, 1); !errors.Is(err, hybridlimit.ErrCostExceedsBurst) {
		t.Errorf("zero Core: Take(0, 1) error = %v, want %v", err, hybridlimit.ErrCostExceedsBurst)
	}
	c.Add(0, 1)
	c.Set(0, 1)
	if got := c.Tokens(0); got != 0 {
		t.Errorf("zero Core: Tokens(0) = %d, want 0", got)
	}
}

func TestCoreSetLimit(t *testing.T) {
	tests := []struct {
		name  string
		spend int64 // of gridLimit's 3 at t0, one token every 100ms
		to    hybridlimit.Limit
		want  []int64 // tokens at t0, t1, t2, ...
	}{
		{"full stays full", 0, hybridlimit.Limit{Rate: 1, Period: tick, Burst: 5}, []int64{5, 5}},
		{"lowered burst clamps at once", 0, hybridlimit.Limit{Rate: 10, Period: time.Second, Burst: 1}, []int64{1, 1}},
		{"tokens kept, slower refill", 2, hybridlimit.Limit{Rate: 1, Period: 2 * tick, Burst: 4}, []int64{1, 1, 2, 2, 3, 3, 4, 4}},
		{"tokens kept, faster refill", 1, hybridlimit.Limit{Rate: 3, Period: tick, Burst: 9}, []int64{2, 5, 8, 9}},
		{"empty refills at the new rate", 3, hybridlimit.Limit{Rate: 3, Period: tick, Burst: 9}, []int64{0, 3, 6, 9}},
		{"empty under a smaller burst", 3, hybridlimit.Limit{Rate: 1, Period: tick / 2, Burst: 2}, []int64{0, 2, 2}},
		{"more than the new burst clamps", 1, hybridlimit.Limit{Rate: 1, Period: tick, Burst: 1}, []int64{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const t0 = int64(time.Hour)
			c := mustCore(t, gridLimit, t0)
			if tt.spend > 0 {
				c.Take(t0, tt.spend)
			}
			if err := c.SetLimit(t0, tt.to); err != nil {
				t.Fatal(err)
			}
			if c.Limit() != tt.to {
				t.Errorf("Limit() = %v, want %v", c.Limit(), tt.to)
			}
			for i, want := range tt.want {
				if got := c.Tokens(t0 + int64(i)*int64(tick)); got != want {
					t.Errorf("Tokens(t%d) = %d, want %d", i, got, want)
				}
			}
		})
	}
}

// TestCoreSetLimitKeepsTokens is the raise an operator makes during an
// incident: 10/s drained, raised to 100/s 500ms later. The bucket holds the
// 5 tokens it refilled by then, as x/time/rate's would, and refills at the
// new rate from there, rather than keep the instant it would have been full
// under the old limit, which would hold nothing until 900ms after the change.
func TestCoreSetLimitKeepsTokens(t *testing.T) {
	from, to := hybridlimit.PerSecond(10), hybridlimit.PerSecond(100)
	const t0, half = int64(time.Hour), int64(500 * time.Millisecond)
	c := mustCore(t, from, t0)
	c.Take(t0, from.Burst)
	if err := c.SetLimit(t0+half, to); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		after time.Duration
		want  int64
	}{{0, 5}, {10 * time.Millisecond, 6}, {100 * time.Millisecond, 15}, {950 * time.Millisecond, 100}} {
		if got := c.Tokens(t0 + half + int64(tt.after)); got != tt.want {
			t.Errorf("Tokens(change+%v) = %d, want %d", tt.after, got, tt.want)
		}
	}
	// The fraction of a token refilled by the change is kept too: 10/s
	// drained, changed 150ms later to 1/s (burst 5), holds 1.5 tokens: 2
	// once half a second has passed, not before.
	slow := hybridlimit.PerSecond(1).WithBurst(5)
	c = mustCore(t, from, t0)
	c.Take(t0, from.Burst)
	const at = t0 + int64(150*time.Millisecond)
	if err := c.SetLimit(at, slow); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		after time.Duration
		want  int64
	}{{0, 1}, {499 * time.Millisecond, 1}, {500 * time.Millisecond, 2}, {3500 * time.Millisecond, 5}} {
		if got := c.Tokens(at + int64(tt.after)); got != tt.want {
			t.Errorf("1.5 tokens kept under %v: Tokens(change+%v) = %d, want %d", slow, tt.after, got, tt.want)
		}
	}
}

// TestCoreOutOfOrderTimes feeds the same bucket times that jump back and
// forth, the pattern behind golang/go#71360: the tokens admitted never exceed
// the burst plus the tokens added up to the latest time.
func TestCoreOutOfOrderTimes(t *testing.T) {
	l := hybridlimit.Limit{Rate: 1, Period: time.Second, Burst: 1}
	c := mustCore(t, l, 0)
	admitted := 0
	for i := range 10000 {
		x := int64(0)
		if i%2 == 1 {
			x = int64(time.Second)
		}
		if r, _ := c.Take(x, 1); r.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("zig-zag between t0 and t0+1s admitted %d, want 2 (burst 1 + 1 token)", admitted)
	}

	rng := rand.New(rand.NewPCG(7, 8))
	l = hybridlimit.PerSecond(10)
	c = mustCore(t, l, 0)
	admitted = 0
	for range 100000 {
		if r, _ := c.Take(rng.Int64N(int64(time.Second)), 1); r.Allowed {
			admitted++
		}
	}
	if admitted > 20 {
		t.Errorf("random times in [t0, t0+1s) admitted %d, want at most 20 (burst 10 + 10 tokens)", admitted)
	}
}

// gcraRef is textbook GCRA in integer nanoseconds, written for clarity, for
// limits whose interval T is a whole number of nanoseconds: there Core must
// agree with it exactly, Result and all.
type gcraRef struct {
	T, B int64
	tat  int64
	full bool // full at every time: a new bucket, or one refilled by Add or Set
}

func (g *gcraRef) debt(x int64) int64 {
	if g.full {
		return 0
	}
	return max(0, g.tat-x)
}

func (g *gcraRef) take(x, n int64) hybridlimit.Result {
	from := max(x, x+g.debt(x))
	r := hybridlimit.Result{}
	if from+n*g.T-x > g.B*g.T {
		r.RetryAfter = time.Duration(from + n*g.T - x - g.B*g.T)
	} else {
		g.tat, g.full, r.Allowed = from+n*g.T, false, true
	}
	r.Remaining = g.tokens(x)
	r.ResetAfter = time.Duration(g.debt(x))
	return r
}

// charge spends n tokens at x whatever the bucket holds: the debt is the
// time the bucket takes to refill from n short of now's level.
func (g *gcraRef) charge(x, n int64) hybridlimit.Result {
	if n > 0 {
		g.tat, g.full = max(x, x+g.debt(x))+n*g.T, false
	}
	r := hybridlimit.Result{Allowed: true, Remaining: g.tokens(x), ResetAfter: time.Duration(g.debt(x))}
	if d := g.debt(x); d+g.T > g.B*g.T {
		r.RetryAfter = time.Duration(d + g.T - g.B*g.T)
	}
	return r
}

func (g *gcraRef) tokens(x int64) int64 { return max(0, g.B-(g.debt(x)+g.T-1)/g.T) }

func (g *gcraRef) add(x, n int64) {
	if d := g.debt(x); d > 0 && n >= 1 {
		if n*g.T >= d {
			g.full = true
		} else {
			g.tat -= n * g.T
		}
	}
}

func (g *gcraRef) set(x, k int64) {
	if k >= g.B {
		g.full = true
		return
	}
	g.tat, g.full = x+(g.B-max(0, k))*g.T, false
}

// FuzzCore checks Core against gcraRef on random calls at random times,
// forwards and backwards.
func FuzzCore(f *testing.F) {
	f.Add(uint32(100_000_000), uint8(10), uint8(3), []byte{0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 4, 1, 1, 0, 3})
	f.Add(uint32(7), uint8(200), uint8(200), []byte{0, 0, 100, 0, 1, 50, 2, 128, 7, 3, 7, 1, 1, 0, 60})
	f.Add(uint32(1_000_003), uint8(3), uint8(1), []byte{0, 9, 1, 0, 9, 1, 0, 200, 1, 0, 56, 1})
	f.Fuzz(func(t *testing.T, interval uint32, rate, burst uint8, ops []byte) {
		T, r := int64(interval)+1, int64(rate%100)+1
		l := hybridlimit.Limit{Rate: r, Period: time.Duration(T * r), Burst: int64(burst) + 1}
		if l.Validate() != nil {
			return
		}
		x := int64(1) << 61
		c := mustCore(t, l, x)
		ref := &gcraRef{T: T, B: l.Burst, full: true}
		for ; len(ops) >= 3; ops = ops[3:] {
			kind, n := ops[0]%5, int64(int8(ops[2]))
			x += int64(int8(ops[1])) * (T/3 + 1)
			switch kind {
			case 0:
				got, err := c.Take(x, n)
				if n < 1 || n > l.Burst {
					if err == nil {
						t.Fatalf("Take(%d, %d) error = nil", x, n)
					}
					continue
				}
				want := ref.take(x, n)
				want.Limit = l
				if got != want {
					t.Fatalf("%v: Take(%d, %d) = %+v, want %+v", l, x, n, got, want)
				}
			case 1:
				c.Add(x, n)
				ref.add(x, n)
			case 2:
				c.Set(x, n)
				ref.set(x, n)
			case 3:
				if got, want := c.Tokens(x), ref.tokens(x); got != want {
					t.Fatalf("%v: Tokens(%d) = %d, want %d", l, x, got, want)
				}
			case 4: // usage past what is left: up to about twice the largest burst
				n *= 4
				got, err := c.Charge(x, n)
				if n < 0 {
					if !errors.Is(err, hybridlimit.ErrInvalidCost) {
						t.Fatalf("Charge(%d, %d) error = %v, want ErrInvalidCost", x, n, err)
					}
					continue
				}
				want := ref.charge(x, n)
				want.Limit = l
				if err != nil || got != want {
					t.Fatalf("%v: Charge(%d, %d) = %+v, %v; want %+v", l, x, n, got, err, want)
				}
			}
		}
	})
}

// TestCoreSetLimitAtEarlierTime checks that a limit change made at a time
// long before the bucket's state keeps the instant it is full again, as one
// made at the latest time does: three years back, a drained bucket still
// holds nothing at the instant it was drained.
func TestCoreSetLimitAtEarlierTime(t *testing.T) {
	from, to := hybridlimit.PerSecond(10), hybridlimit.PerSecond(20)
	const x, back = int64(epoch), int64(3 * 365 * 24 * time.Hour)
	c := mustCore(t, from, x)
	c.Take(x, from.Burst) // full again at x+1s
	if err := c.SetLimit(x-back, to); err != nil {
		t.Fatal(err)
	}
	if got := c.Tokens(x); got != 0 {
		t.Errorf("drained at x, SetLimit(x-3y, %v), then Tokens(x) = %d, want 0", to, got)
	}
	if got, want := c.Tokens(x+int64(time.Second)), to.Burst; got != want {
		t.Errorf("Tokens(x+1s) = %d, want %d: full again at x+1s", got, want)
	}
}

// TestCoreSetLimitToHighRate checks that a bucket converted to a limit whose
// clock runs very fast refills at that rate and no faster: drained under
// one token every 7 hours, then 2^40 tokens a millisecond.
func TestCoreSetLimitToHighRate(t *testing.T) {
	slow := hybridlimit.Every(7*time.Hour, 1)
	fast := hybridlimit.Limit{Rate: hybridlimit.MaxQuantity, Period: time.Millisecond, Burst: hybridlimit.MaxQuantity}
	const x = int64(epoch)
	c := mustCore(t, slow, x)
	if r, _ := c.Take(x, 1); !r.Allowed {
		t.Fatalf("Take(x, 1) = %+v on a full bucket", r)
	}
	if err := c.SetLimit(x, fast); err != nil {
		t.Fatal(err)
	}
	if got := c.Tokens(x); got != 0 {
		t.Errorf("drained under %v, SetLimit(x, %v), then Tokens(x) = %d, want 0", slow, fast, got)
	}
	if got, want := c.Tokens(x+int64(time.Microsecond)), fast.Burst/1000; got != want {
		t.Errorf("Tokens(x+1us) = %d, want %d", got, want)
	}
	if got := c.Tokens(x + int64(time.Millisecond)); got != fast.Burst {
		t.Errorf("Tokens(x+1ms) = %d, want %d: full", got, fast.Burst)
	}
}

// TestCoreSetLimitMatchesModel switches a Core among several limits at
// random times, spending at random, against an exact model that keeps the
// tokens across each change (refilled under the old limit, cut to the new
// burst; a full bucket stays full). The Core follows its own decisions,
// the model the Core's: the Core never admits a cost the model does not
// hold and never holds more whole tokens than the model, and holds at
// most one fewer per change since the bucket was last full for a while (each change
// rounds toward fewer tokens, by less than a unit). The limits are all of
// the exact case, so nothing else is rounded.
func TestCoreSetLimitMatchesModel(t *testing.T) {
	limits := []hybridlimit.Limit{
		gridLimit, hybridlimit.PerSecond(1000), hybridlimit.PerMinute(7).WithBurst(2),
		{Rate: 13, Period: 1_000_001 * time.Microsecond, Burst: 13}, hybridlimit.PerHour(1e10),
		hybridlimit.Every(250*time.Millisecond, 5), {Rate: 3, Period: time.Second, Burst: 9},
	}
	for seed := range 20 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		l := limits[rng.IntN(len(limits))]
		now := int64(epoch)
		c := mustCore(t, l, now)
		model := new(big.Rat).SetInt64(l.Burst) // tokens at ts
		ts := now
		at := func(x int64) *big.Rat { // the model's tokens at x
			r := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(x-ts), big.NewInt(l.Rate)), big.NewInt(int64(l.Period)))
			r.Add(r, model)
			if b := new(big.Rat).SetInt64(l.Burst); r.Cmp(b) > 0 {
				r = b
			}
			return r
		}
		changes, fullSince := 0, int64(-1)
		for i := range 400 {
			now += rng.Int64N(int64(l.Period)/l.Rate*2 + 1)
			if rng.IntN(4) == 0 {
				next := limits[rng.IntN(len(limits))]
				// Full stays full: as the Core has it, which may be short of
				// the model by less than a unit per change, and so not full
				// at the instant the model fills up.
				tok := at(now)
				if c.Tokens(now) == l.Burst || tok.Cmp(new(big.Rat).SetInt64(next.Burst)) > 0 {
					tok = new(big.Rat).SetInt64(next.Burst)
				}
				if err := c.SetLimit(now, next); err != nil {
					t.Fatal(err)
				}
				l, model, ts = next, tok, now
				changes++
				fullSince = -1
			}
			tok := at(now)
			// Full at an earlier call and still: the Core, less than a unit
			// short per change, is full by now too.
			if full := tok.Cmp(new(big.Rat).SetInt64(l.Burst)) == 0; !full {
				fullSince = -1
			} else if fullSince < 0 {
				fullSince = now
			} else if fullSince < now {
				changes = 0
			}
			whole := new(big.Int).Quo(tok.Num(), tok.Denom()).Int64()
			if got := c.Tokens(now); got > whole || got < whole-int64(changes) {
				t.Fatalf("seed %d op %d under %v: Core holds %d, the model %s after %d changes", seed, i, l, got, tok.FloatString(6), changes)
			}
			cost := 1 + rng.Int64N(min(l.Burst, 4))
			r, err := c.Take(now, cost)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				if tok.Cmp(new(big.Rat).SetInt64(cost)) < 0 {
					t.Fatalf("seed %d op %d under %v: admitted %d, the model holds %s", seed, i, l, cost, tok.FloatString(6))
				}
				model, ts = tok.Sub(tok, new(big.Rat).SetInt64(cost)), now
				fullSince = -1
			}
		}
	}
}

// TestChargeCarriesDebt charges a reply's 25 tokens to a bucket of 10 a
// second, burst 10, on Core, Bucket and Table alike: the charge lands whole,
// 15 tokens of debt and the burst refill at 10 a second, so the next token
// is there 1.6 s later, not before; a negative charge or one deeper than
// MaxDebt is refused and changes nothing.
func TestChargeCarriesDebt(t *testing.T) {
	l := hybridlimit.PerSecond(10)
	t0 := time.Unix(1_800_000_000, 0)
	c := mustCore(t, l, epoch)
	b := mustBucket(t, l)
	tb, err := NewTable()
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	b.SetAt(at(0), 10) // the Bucket's own axis: full at t0
	subjects := []struct {
		name   string
		charge func(d time.Duration, n int64) (hybridlimit.Result, error)
		take   func(d time.Duration) (hybridlimit.Result, error)
	}{
		{"core",
			func(d time.Duration, n int64) (hybridlimit.Result, error) { return c.Charge(int64(epoch)+int64(d), n) },
			func(d time.Duration) (hybridlimit.Result, error) { return c.Take(int64(epoch)+int64(d), 1) }},
		{"bucket",
			func(d time.Duration, n int64) (hybridlimit.Result, error) { return b.ChargeAt(at(d), n) },
			func(d time.Duration) (hybridlimit.Result, error) { return b.TakeN(at(d), 1) }},
		{"table",
			func(d time.Duration, n int64) (hybridlimit.Result, error) { return tb.Charge("k", at(d), l, n) },
			func(d time.Duration) (hybridlimit.Result, error) { return tb.AllowN("k", at(d), l, 1) }},
	}
	deepest, err := MaxDebt(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subjects {
		r, err := s.charge(0, 25)
		want := hybridlimit.Result{Limit: l, Allowed: true, RetryAfter: 1600 * time.Millisecond, ResetAfter: 2500 * time.Millisecond}
		if err != nil || r != want {
			t.Errorf("%s: Charge(25) = %+v, %v; want %+v", s.name, r, err, want)
		}
		if r, err := s.take(1599 * time.Millisecond); err != nil || r.Allowed || r.RetryAfter != time.Millisecond {
			t.Errorf("%s: 1.599 s later: %+v, %v; want denied, a millisecond to wait", s.name, r, err)
		}
		for _, n := range []int64{-1, deepest} {
			if _, err := s.charge(time.Second, n); !errors.Is(err, hybridlimit.ErrInvalidCost) {
				t.Errorf("%s: Charge(%d) = %v, want ErrInvalidCost", s.name, n, err)
			}
		}
		if r, err := s.take(1600 * time.Millisecond); err != nil || !r.Allowed || r.Remaining != 0 {
			t.Errorf("%s: 1.6 s later: %+v, %v; want admitted, nothing left", s.name, r, err)
		}
	}
}
