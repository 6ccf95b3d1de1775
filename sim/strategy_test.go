package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

func TestParseStrategiesAndIntervals(t *testing.T) {
	if got, err := ParseStrategies("all"); err != nil || len(got) != 5 {
		t.Errorf(`ParseStrategies("all") = %v, %v`, got, err)
	}
	if got, err := ParseStrategies(" reserve,exact "); err != nil || len(got) != 2 || got[0] != Reserve {
		t.Errorf("ParseStrategies = %v, %v", got, err)
	}
	for _, bad := range []string{"", "fast", "reserve,reserve", "reserve-sharded,reserve-sharded"} {
		if _, err := ParseStrategies(bad); err == nil {
			t.Errorf("ParseStrategies(%q) succeeded", bad)
		}
	}
	if got, err := ParseIntervals("50ms, 1s"); err != nil || len(got) != 2 {
		t.Errorf("ParseIntervals = %v, %v", got, err)
	}
	for _, bad := range []string{"", "fast", "0s", "2m", "1s,1s"} {
		if _, err := ParseIntervals(bad); err == nil {
			t.Errorf("ParseIntervals(%q) succeeded", bad)
		}
	}
}

func TestPlan(t *testing.T) {
	runs := plan([]Strategy{Reserve, Exact, Optimistic}, []time.Duration{time.Second, 50 * time.Millisecond})
	want := []run{
		{strategy: Reserve, interval: time.Second}, {strategy: Reserve, interval: 50 * time.Millisecond}, {strategy: Exact},
		{strategy: Optimistic, interval: time.Second}, {strategy: Optimistic, interval: 50 * time.Millisecond},
	}
	if len(runs) != len(want) {
		t.Fatalf("plan = %v, want %v", runs, want)
	}
	for i := range want {
		if runs[i] != want[i] {
			t.Errorf("plan[%d] = %v, want %v", i, runs[i], want[i])
		}
	}
}

func TestLocalShare(t *testing.T) {
	tests := []struct {
		limit hybridlimit.Limit
		n, i  int
		want  hybridlimit.Limit
		ok    bool
	}{
		{hybridlimit.PerSecond(100), 8, 0, hybridlimit.Limit{Rate: 100, Period: 8 * time.Second, Burst: 13}, true},
		{hybridlimit.PerSecond(100), 8, 3, hybridlimit.Limit{Rate: 100, Period: 8 * time.Second, Burst: 13}, true},
		{hybridlimit.PerSecond(100), 8, 4, hybridlimit.Limit{Rate: 100, Period: 8 * time.Second, Burst: 12}, true},
		{hybridlimit.PerSecond(100), 8, 7, hybridlimit.Limit{Rate: 100, Period: 8 * time.Second, Burst: 12}, true},
		{hybridlimit.PerSecond(100), 1, 0, hybridlimit.PerSecond(100), true},
		{hybridlimit.PerSecond(3).WithBurst(1), 4, 0, hybridlimit.Limit{Rate: 3, Period: 4 * time.Second, Burst: 1}, true},
		{hybridlimit.PerSecond(3).WithBurst(1), 4, 1, hybridlimit.Limit{Rate: 3, Period: 4 * time.Second, Burst: 0}, false},
	}
	for _, tt := range tests {
		if got, ok := localShare(tt.limit, tt.n, tt.i); got != tt.want || ok != tt.ok {
			t.Errorf("localShare(%v, %d, %d) = %+v, %v, want %+v, %v", tt.limit, tt.n, tt.i, got, ok, tt.want, tt.ok)
		}
	}
	// The shares add up to the limit: the bursts to Burst, the rates (each
	// over n periods) to Rate per period.
	for _, l := range []hybridlimit.Limit{hybridlimit.PerSecond(100), hybridlimit.PerSecond(100).WithBurst(1), hybridlimit.PerMinute(7)} {
		for _, n := range []int{1, 3, 8, 1024} {
			var burst int64
			for i := range n {
				s, _ := localShare(l, n, i)
				burst += s.Burst
				if s.Rate != l.Rate || s.Period != l.Period*time.Duration(n) {
					t.Errorf("localShare(%v, %d, %d) = %+v: rate share is not Rate per %d periods", l, n, i, s, n)
				}
			}
			if burst != l.Burst {
				t.Errorf("localShare(%v, %d, i): bursts sum to %d, want %d", l, n, burst, l.Burst)
			}
		}
	}
}

func TestStartOrder(t *testing.T) {
	runs := plan(Strategies(), []time.Duration{time.Second, 50 * time.Millisecond})
	// plan: exact, local, optimistic 1s, optimistic 50ms, reserve 1s,
	// reserve 50ms, reserve-sharded 1s, reserve-sharded 50ms
	want := []int{5, 7, 3, 4, 6, 2, 0, 1}
	if got := startOrder(runs); !slices.Equal(got, want) {
		t.Errorf("startOrder(%v) = %v, want %v", runs, got, want)
	}
}
