package scripts

import (
	"math"
	"strconv"
	"testing"
)

// TestNumTextIsPercent17g checks that bucket.lua's num_text writes what
// string.format('%.17g') does, on Redis and on miniredis's interpreter (the
// tests' and the simulator's): its %d path for positive integers below
// 2^53 is a shortcut, never another text for a stored number.
func TestNumTextIsPercent17g(t *testing.T) {
	vs := []float64{0, math.Copysign(0, -1), 1, 2, 10, 999, 1e15, 1 << 52, 1<<53 - 2, 1<<53 - 1, 1 << 53, 1<<53 + 2, 1e17,
		1e20, 1e300, 0.25, 0.5, 1.5, 1_700_000_000_123_456, 1_700_000_000_123_456.25, 1_700_000_000_123_456.5,
		1_800_000_000_000_000, 123456.789, 1e-7, -1, -1_700_000_000_123_456, -(1 << 53), math.MaxFloat64,
		math.SmallestNonzeroFloat64}
	for i := range 300 { // times as scripts write them: microseconds, whole and in quarter steps
		us := float64(1_700_000_000_000_000 + int64(i)*7_919_731)
		vs = append(vs, us, us+0.25*float64(i%4))
	}
	// Each value as an integer mantissa and exponent, which both
	// interpreters' tonumber read (miniredis's reads no "1e+20").
	args := make([]any, 0, 2*len(vs))
	for _, v := range vs {
		frac, exp := math.Frexp(v)
		args = append(args, strconv.FormatInt(int64(frac*(1<<53)), 10), strconv.Itoa(exp-53))
	}
	s := NewScript("num_text", string(mustRead(preamble))+"\n"+string(mustRead(bucket))+`
local bad = {}
for i = 1, #ARGV, 2 do
  local x = math.ldexp(tonumber(ARGV[i]), tonumber(ARGV[i + 1]))
  if num_text(x) ~= string.format('%.17g', x) then
    bad[#bad + 1] = (i + 1) / 2
  end
end
return bad`)
	for _, srv := range interpreters(t) {
		reply, err := s.Run(t.Context(), srv.c, nil, args...)
		if err != nil {
			t.Fatalf("%s: %v", srv.name, err)
		}
		bad, ok := reply.([]any)
		if !ok {
			t.Fatalf("%s: reply %T", srv.name, reply)
		}
		for _, i := range bad {
			t.Errorf("%s: num_text(%v) is not its %%.17g text", srv.name, vs[i.(int64)-1])
		}
	}
}
