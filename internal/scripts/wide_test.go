package scripts

import (
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/lua"
)

// TestMulDiv checks wide.lua's mul_div against math/big over its
// whole domain (a, b < 2^52, |c| < 2^52, d < 2^50, |quotient| < 2^50), on
// a real server and on miniredis: products near 2^52 where it leaves the
// plain path, the largest operands, and random ones of every size.
func TestMulDiv(t *testing.T) {
	redistest.NoLeaks(t)
	const (
		max52 = 1<<52 - 1
		max50 = 1<<50 - 1
	)
	cases := [][4]int64{
		{0, 0, 0, 1}, {1, 1, -1, 1}, {0, 0, -5, 3}, {0, 7, -max50, 2},
		{1 << 26, 1 << 26, 0, 4}, {1 << 26, 1 << 26, -1, 4}, {1<<26 + 1, 1 << 26, -(1 << 26), 5},
		{max52, 1 << 47, max52, max50}, {max52, 1 << 47, -max52, max50}, {max50, max50, 0, max50}, {max50, max50, -1, max50},
		{1 << 40, 86_400_000_000, 0, 1 << 40}, {10_000_000_000, 3_600_000_000, -1, 10_000_000_000},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for len(cases) < 20000 {
		a := rng.Int64N(1 << rng.IntN(53))
		d := 1 + rng.Int64N(1<<(1+rng.IntN(50))-1)
		// b keeps the quotient below 2^50.
		bmax := int64(max52)
		if a > 0 {
			if q := new(big.Int).Quo(new(big.Int).Mul(big.NewInt(max50), big.NewInt(d)), big.NewInt(a)); q.Cmp(big.NewInt(max52)) < 0 {
				bmax = q.Int64()
			}
		}
		b := rng.Int64N(bmax + 1)
		c := rng.Int64N(1<<rng.IntN(53)) * (1 - 2*rng.Int64N(2))
		if q, _ := wantMulDiv(a, b, c, d); q.IsInt64() && q.Int64() > -1<<50 && q.Int64() < 1<<50 {
			cases = append(cases, [4]int64{a, b, c, d})
		}
	}
	args := make([]any, 0, 4*len(cases))
	for _, c := range cases {
		args = append(args, c[0], c[1], c[2], c[3])
	}
	src, err := lua.File("wide.lua")
	if err != nil {
		t.Fatal(err)
	}
	s := NewScript("mul_div", src+`
local mul_div = wide()
local out = {}
for i = 1, #ARGV, 4 do
  local q, r = mul_div(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]))
  out[#out + 1] = q
  out[#out + 1] = r
end
return out`)
	for _, srv := range interpreters(t) {
		reply, err := s.Run(t.Context(), srv.c, nil, args...)
		if err != nil {
			t.Fatalf("%s: %v", srv.name, err)
		}
		got, err := DecodeInts(reply, 2*len(cases))
		if err != nil {
			t.Fatalf("%s: %v", srv.name, err)
		}
		bad := 0
		for i, c := range cases {
			q, r := wantMulDiv(c[0], c[1], c[2], c[3])
			if got[2*i] != q.Int64() || got[2*i+1] != r.Int64() {
				t.Errorf("%s: mul_div(%d, %d, %d, %d) = %d, %d; want %d, %d", srv.name, c[0], c[1], c[2], c[3], got[2*i], got[2*i+1], q, r)
				if bad++; bad == 10 {
					t.FailNow()
				}
			}
		}
	}
}

// wantMulDiv returns floor((a*b + c) / d) and the remainder, in math/big.
func wantMulDiv(a, b, c, d int64) (q, r *big.Int) {
	n := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	n.Add(n, big.NewInt(c))
	return new(big.Int).DivMod(n, big.NewInt(d), new(big.Int)) // Euclidean: r >= 0 as d > 0
}
