package sim

import (
	"math"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

func TestOvershootRatios(t *testing.T) {
	tests := []struct {
		name        string
		per         []keyCount
		over, under float64
	}{
		{"exact", []keyCount{{Admitted: 10, Oracle: 10}, {Admitted: 5, Oracle: 5}}, 0, 0},
		{"over on one key", []keyCount{{Admitted: 12, Oracle: 10}, {Admitted: 10, Oracle: 10}}, 0.1, 0},
		{"under on one key", []keyCount{{Admitted: 10, Oracle: 10}, {Admitted: 7, Oracle: 10}}, 0, 0.15},
		// Over on one key does not cancel under on another.
		{"both", []keyCount{{Admitted: 14, Oracle: 10}, {Admitted: 6, Oracle: 10}}, 0.2, 0.2},
		{"oracle admitted nothing", []keyCount{{Admitted: 3, Oracle: 0}}, 0, 0},
		{"no keys", nil, 0, 0},
	}
	for _, tt := range tests {
		over, under := overshootRatios(tt.per)
		if math.Abs(over-tt.over) > 1e-12 || math.Abs(under-tt.under) > 1e-12 {
			t.Errorf("%s: overshootRatios = %v, %v, want %v, %v", tt.name, over, under, tt.over, tt.under)
		}
	}
}

// times returns n admission times starting at from, every step.
func times(from, step int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + int64(i)*step
	}
	return out
}

func TestWorstWindowOvershoot(t *testing.T) {
	limit := hybridlimit.PerSecond(10).WithBurst(5) // bound: 15 per closed 1s window
	sec := int64(time.Second)
	tests := []struct {
		name  string
		times []int64
		want  float64
	}{
		{"none", nil, 0},
		{"burst then rate, at the bound", append(times(0, 0, 5), times(100*ms, 100*ms, 10)...), 0},
		{"20 at once", times(0, 0, 20), (20.0 - 15) / 15},
		{"30 spread over 1s (closed window)", times(0, sec/29, 30), (30.0 - 15) / 15},
		{"30 spread over 2s", times(0, 2*sec/29, 30), 0},
		// 16 in one closed window: the last at exactly t+1s still counts.
		{"closed window end", append(times(0, 0, 15), sec), 1.0 / 15},
		{"just outside", append(times(0, 0, 15), sec+1), 0},
		{"worst of two windows", append(times(0, 0, 16), times(10*sec, 0, 18)...), 3.0 / 15},
	}
	for _, tt := range tests {
		if got := worstWindowOvershoot(tt.times, limit); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s: worstWindowOvershoot = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestWorstWindowReadme holds docs/results.md's examples of what the worst
// window column sees at 100/s burst 100 (a bound of 200 per second), and
// what it is blind to: excess that stays within the bound per period.
func TestWorstWindowReadme(t *testing.T) {
	limit := hybridlimit.PerSecond(100)
	sec := int64(time.Second)
	tests := []struct {
		name  string
		times []int64
		want  float64
	}{
		{"300 in one second", times(0, sec/299, 300), 0.5},
		{"28%: 256 in one second", times(0, sec/255, 256), 0.28},
		{"174%: 548 in one second, 5.5x the rate", times(0, sec/547, 548), 1.74},
		{"190 at one instant, 1.9x the burst", times(0, 0, 190), 0},
		{"a steady 190/s for 10s, 1.9x the rate", times(0, sec/190, 1900), 0},
	}
	for _, tt := range tests {
		if got := worstWindowOvershoot(tt.times, limit); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s: worstWindowOvershoot = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMeasure(t *testing.T) {
	limit := hybridlimit.PerSecond(10).WithBurst(2)
	reqs := []request{{At: 0, Key: 0}, {At: 0, Key: 0}, {At: 0, Key: 0}, {At: 0, Key: 1}, {At: ms, Key: 1}, {At: 2 * ms, Key: 1}}
	oracle := []bool{true, true, false, true, true, false}
	admitted := []bool{true, true, true, true, false, false} // key 0 one over, key 1 one under
	a := measure(reqs, 2, limit, 3*time.Millisecond, admitted, oracle)
	if a.Decisions != 6 || a.Admitted != 4 || a.OracleAdmitted != 4 {
		t.Errorf("measure counts = %d, %d, %d, want 6, 4, 4", a.Decisions, a.Admitted, a.OracleAdmitted)
	}
	if a.Overshoot != 0.25 || a.Undershoot != 0.25 {
		t.Errorf("measure ratios = %v over, %v under, want 0.25, 0.25", a.Overshoot, a.Undershoot)
	}
	if a.WorstWindow != 0 { // 3 at once against a bound of 2 + 10 per second
		t.Errorf("measure worst window = %v, want 0", a.WorstWindow)
	}
	// Key 0's 3 against B + r d = 2 + 10 x 0.003.
	if math.Abs(a.MostOverBound-0.97) > 1e-9 {
		t.Errorf("measure most over the bound = %v, want 0.97", a.MostOverBound)
	}
	if b := measure(reqs, 2, limit, time.Second, admitted, oracle); b.MostOverBound != 0 {
		t.Errorf("over 1s, measure most over the bound = %v, want 0", b.MostOverBound)
	}
	if k := a.perKey[0]; k.Demand != 3 || k.Admitted != 3 || k.Oracle != 2 {
		t.Errorf("key 0 = %+v, want demand 3, admitted 3, oracle 2", k)
	}
	over := topKeys(a.perKey, 5, 1)
	under := topKeys(a.perKey, 5, -1)
	if len(over) != 1 || over[0].Key != 0 || len(under) != 1 || under[0].Key != 1 {
		t.Errorf("topKeys = %+v over, %+v under, want key 0 over and key 1 under", over, under)
	}
}
