package sim

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// small returns a scenario small enough for tests under the race detector.
// About a thousand requests; every workload has keys over their limit.
func small(w Workload) Scenario {
	s := DefaultScenario(w)
	s.Instances, s.Keys, s.Duration, s.Rate = 4, 100, time.Second, 1000
	switch w {
	case Uniform:
		s.Keys = 2 // 500/s a key against 100/s and a burst of 100
	case Flash:
		s.Keys, s.Rate = 20, 400 // key 0 steps up to 1000/s
	}
	return s
}

func TestGenerateIsDeterministic(t *testing.T) {
	for _, w := range Workloads() {
		a, err := generate(small(w))
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		b, _ := generate(small(w))
		if !slices.Equal(a, b) {
			t.Errorf("%s: two streams of the same seed differ", w)
		}
		other := small(w)
		other.Seed++
		c, _ := generate(other)
		if slices.Equal(a, c) {
			t.Errorf("%s: seeds %d and %d give the same stream", w, small(w).Seed, other.Seed)
		}
	}
}

func TestGenerateShape(t *testing.T) {
	for _, w := range Workloads() {
		s := small(w)
		reqs, err := generate(s)
		if err != nil {
			t.Fatal(err)
		}
		want := s.Rate * s.Duration.Seconds()
		if w == Flash {
			want += (s.Flash - 1) * s.Rate / float64(s.Keys) * s.Duration.Seconds() / 2
		}
		if got := float64(len(reqs)); math.Abs(got-want) > 5*math.Sqrt(want) {
			t.Errorf("%s: %v requests, want about %v", w, got, want)
		}
		for i, r := range reqs {
			if r.At < 0 || r.At >= int64(s.Duration) || r.At%1000 != 0 {
				t.Fatalf("%s: request %d at %dns: outside the run or not a whole microsecond", w, i, r.At)
			}
			if i > 0 && r.At < reqs[i-1].At {
				t.Fatalf("%s: request %d at %d before request %d at %d", w, i, r.At, i-1, reqs[i-1].At)
			}
			if r.Key < 0 || int(r.Key) >= s.Keys || r.Inst < 0 || int(r.Inst) >= s.Instances {
				t.Fatalf("%s: request %d = %+v out of range", w, i, r)
			}
		}
	}
}

// share returns the fraction of reqs for which f holds.
func share(reqs []request, f func(request) bool) float64 {
	n := 0
	for _, r := range reqs {
		if f(r) {
			n++
		}
	}
	return float64(n) / float64(len(reqs))
}

func TestGenerateWorkloads(t *testing.T) {
	hot, _ := generate(small(Hotspot))
	// Zipf s=1.1 over 100 keys: key 0 draws 1/H(100) of the requests.
	h := 0.0
	for i := 1; i <= 100; i++ {
		h += math.Pow(float64(i), -1.1)
	}
	if got, want := share(hot, func(r request) bool { return r.Key == 0 }), 1/h; math.Abs(got-want) > 0.04 {
		t.Errorf("hotspot: key 0 has %.3f of the requests, want %.3f", got, want)
	}

	s := small(Flash)
	flash, _ := generate(s)
	half := int64(s.Duration) / 2
	before := share(flash, func(r request) bool { return r.Key == 0 && r.At < half })
	after := share(flash, func(r request) bool { return r.Key == 0 && r.At >= half })
	if ratio := after / before; ratio < 0.8*s.Flash || ratio > 1.2*s.Flash {
		t.Errorf("flash: key 0 asks %.1f times more after half time, want about %v", ratio, s.Flash)
	}

	s = small(SkewedLB)
	lb, _ := generate(s)
	if got := share(lb, func(r request) bool { return int(r.Key)%s.Instances == int(r.Inst) }); math.Abs(got-s.Skew) > 0.05 {
		t.Errorf("skewed-lb: %.3f of requests at the key's home instance, want %v", got, s.Skew)
	}
	uni, _ := generate(small(Uniform))
	if got := share(uni, func(r request) bool { return r.Key < 1 }); math.Abs(got-0.5) > 0.05 {
		t.Errorf("uniform: %.3f of requests on the first half of the keys, want 0.5", got)
	}
}

func TestScenarioValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Scenario)
	}{
		{"unknown workload", func(s *Scenario) { s.Workload = "zigzag" }},
		{"no instances", func(s *Scenario) { s.Instances = 0 }},
		{"no keys", func(s *Scenario) { s.Keys = 0 }},
		{"no duration", func(s *Scenario) { s.Duration = 0 }},
		{"no rate", func(s *Scenario) { s.Rate = 0 }},
		{"NaN rate", func(s *Scenario) { s.Rate = math.NaN() }},
		{"zipf at 1", func(s *Scenario) { s.ZipfS = 1 }},
		{"bad limit", func(s *Scenario) { s.Limit = hybridlimit.Limit{} }},
		{"too many requests", func(s *Scenario) { s.Rate, s.Duration = 1e8, time.Hour }},
	}
	for _, tt := range tests {
		s := DefaultScenario(Hotspot)
		tt.edit(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil, want an error", tt.name)
		}
	}
	for _, w := range Workloads() {
		if err := DefaultScenario(w).Validate(); err != nil {
			t.Errorf("DefaultScenario(%s).Validate() = %v", w, err)
		}
	}
}

// TestDefaultHotspotShape checks that the default hotspot, shortened to
// keep cmd/sim's default run quick, still has what it is for: a few keys
// far over their limit and a tail of thousands of keys well under it, and
// enough time for the hybrid limiters to sync many times.
func TestDefaultHotspotShape(t *testing.T) {
	s := DefaultScenario(Hotspot)
	reqs, err := generate(s)
	if err != nil {
		t.Fatal(err)
	}
	demand := make([]float64, s.Keys) // requests per second
	for _, r := range reqs {
		demand[r.Key] += 1 / s.Duration.Seconds()
	}
	limit := float64(s.Limit.Rate) / s.Limit.Period.Seconds()
	var over, tail int
	for _, d := range demand {
		if d > limit {
			over++
		}
		if d < limit/100 {
			tail++
		}
	}
	if over < 3 || over > 20 || demand[0] < 5*limit {
		t.Errorf("%d keys over the limit of %v/s, the hottest at %.0f/s; want 3 to 20, the hottest 5 times over", over, limit, demand[0])
	}
	if tail < 1000 {
		t.Errorf("%d keys under 1%% of the limit; want a tail of at least 1000", tail)
	}
	if rounds := s.Duration / time.Second; rounds < 8 {
		t.Errorf("duration %v: fewer than 8 rounds at a 1s interval", s.Duration)
	}
}
