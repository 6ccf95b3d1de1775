package hybridlimit

import (
	"math/big"
	"testing"
)

// exactRefill is ceil(Burst·Period/Rate) in ns, exactly.
func exactRefill(l Limit) int64 {
	num := new(big.Int).Mul(big.NewInt(l.Burst), big.NewInt(int64(l.Period)))
	q, m := new(big.Int).QuoRem(num, big.NewInt(l.Rate), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// Refill is "the time an empty bucket takes to hold Burst tokens again", and
// Validate rejects limits "whose bucket would take longer than MaxRefill to
// fill". Refill is computed in float64 and is off by a few ns at large
// values, so Validate rejects limits that refill in exactly MaxRefill and
// accepts some that take longer.
// TestRefillExact checks Refill against ceil(Burst x Period / Rate) in
// big integers, and Validate's MaxRefill bound at its edge: in float64 a
// limit refilling in exactly MaxRefill was refused and one taking 2ns
// more accepted.
func TestRefillExact(t *testing.T) {
	for _, tc := range []struct {
		l     Limit
		valid bool
	}{
		{Limit{Rate: 23, Period: MaxRefill, Burst: 23}, true},        // refills in exactly MaxRefill
		{Limit{Rate: 2, Period: MaxRefill*2/3 + 1, Burst: 3}, false}, // MaxRefill + 2ns
		{Limit{Rate: 3, Period: MaxRefill*3/4 + 1, Burst: 4}, false}, // MaxRefill + 2ns
	} {
		exact := exactRefill(tc.l)
		if got := int64(tc.l.Refill()); got != exact {
			t.Errorf("%v: Refill() = %dns, exact %dns", tc.l, got, exact)
		}
		if err := tc.l.Validate(); (err == nil) != tc.valid {
			t.Errorf("%v (refill exactly %dns, MaxRefill %dns): Validate() = %v, want valid=%v", tc.l, exact, int64(MaxRefill), err, tc.valid)
		}
	}
}
