package scripts

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// packedCheck compares packed.lua's Lua struct, under the name struct,
// with the one the interpreter has, under the name real, on the doubles
// ARGV[1] holds, packed: it returns the 1-based index of each double on
// which they differ (bytes written, value read), and 0 last when packing
// several doubles in one call, or reading from a position, differs.
const packedCheck = `
local bad = {}
local data = ARGV[1]
local n = #data / 8
for i = 1, n do
  local at = 8 * i - 7
  local v = real.unpack('<d', data, at)
  local mine, next = struct.unpack('<d', data, at)
  local bytes = struct.pack('<d', v)
  if bytes ~= real.pack('<d', v) or bytes ~= string.sub(data, at, at + 7) or mine ~= v or next ~= at + 8 then
    bad[#bad + 1] = i
  end
end
if n >= 4 then
  local a, b, c, d, e = struct.unpack('<dddd', data, 9)
  local ra, rb, rc, rd, re = real.unpack('<dddd', data, 9)
  if a ~= ra or b ~= rb or c ~= rc or d ~= rd or e ~= re
    or struct.pack('<dddd', a, b, c, d) ~= real.pack('<dddd', a, b, c, d) then
    bad[#bad + 1] = 0
  end
end
return bad
`

// packedDoubles returns doubles for packedCheck: the edges of every kind
// of finite double and random bit patterns, NaN and infinities left out
// (packed.lua refuses them; the scripts never write them).
func packedDoubles() string {
	vs := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1.5, 3, -7, 1 << 52, 1<<53 - 1, -(1<<53 - 1),
		1_700_000_000_123_456.5, 1_800_000_000_000_000, 123456.789, 1e-300, math.SmallestNonzeroFloat64,
		-math.SmallestNonzeroFloat64, 2.2250738585072014e-308, 2.225073858507201e-308, math.MaxFloat64, -math.MaxFloat64}
	r := rand.New(rand.NewPCG(1, 2))
	for len(vs) < 2000 {
		v := math.Float64frombits(r.Uint64())
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			vs = append(vs, v)
		}
	}
	for i := range 200 { // integers, as messages and ledgers hold
		vs = append(vs, float64(r.Int64N(1<<53)), -float64(i))
	}
	return packDoubles(vs...)
}

// TestPackedMatchesRedis checks that packed.lua's struct, which runs where
// the interpreter has none (miniredis), writes and reads what Redis's own
// struct does, byte for byte.
func TestPackedMatchesRedis(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	src := string(mustRead(packed))
	const lookup = "local struct = rawget(_G, 'struct')"
	if !strings.Contains(src, lookup) {
		t.Fatalf("packed.lua does not look struct up as %q", lookup)
	}
	src = "local real = struct\n" + strings.Replace(src, lookup, "local struct = nil", 1) + packedCheck
	bad, err := c.Eval(t.Context(), src, nil, packedDoubles()).Int64Slice()
	if err != nil || len(bad) > 0 {
		t.Errorf("packed.lua against Redis's struct: differs at %v (%v)", bad, err)
	}
	for _, v := range []string{"0/0", "1/0", "-1/0"} {
		err := c.Eval(t.Context(), strings.Replace(src, packedCheck, "return struct.pack('<d', "+v+")", 1), nil).Err()
		if err == nil || !strings.Contains(err.Error(), "cannot pack") {
			t.Errorf("packed.lua packing %s: %v, want an error", v, err)
		}
	}
	for _, f := range []string{"<i8", "d", ">d", "<dq"} {
		err := c.Eval(t.Context(), strings.Replace(src, packedCheck, "return struct.pack('"+f+"', 1)", 1), nil).Err()
		if err == nil || !strings.Contains(err.Error(), "unsupported") {
			t.Errorf("packed.lua packing format %q: %v, want an error", f, err)
		}
	}
}
