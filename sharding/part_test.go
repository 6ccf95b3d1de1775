package sharding_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/sharding"
)

func TestPartsAddUp(t *testing.T) {
	limits := []hybridlimit.Limit{
		hybridlimit.PerSecond(100),
		hybridlimit.PerMinute(7).WithBurst(10),
		hybridlimit.PerHour(1_000_003).WithBurst(5),
		{Rate: 3, Period: time.Second, Burst: 64},
	}
	for _, limit := range limits {
		for s := 1; s <= sharding.MaxShards; s++ {
			fit := sharding.Fit(limit, s)
			if fit < 1 || fit > s {
				t.Fatalf("Fit(%v, %d) = %d", limit, s, fit)
			}
			var rate float64 // tokens per hour
			var burst int64
			for j := range fit {
				p := sharding.Part(limit, j, fit)
				if err := p.Validate(); err != nil {
					t.Fatalf("Part(%v, %d, %d) = %v: %v", limit, j, fit, p, err)
				}
				rate += p.TokensIn(time.Hour)
				burst += p.Burst
			}
			if want := limit.TokensIn(time.Hour); math.Abs(rate-want) > 1e-9*want || burst != limit.Burst {
				t.Fatalf("%v split %d ways adds up to %v tokens an hour, burst %d", limit, fit, rate, burst)
			}
		}
	}
	if got := sharding.Fit(hybridlimit.PerSecond(100).WithBurst(3), 8); got != 3 {
		t.Errorf("Fit with burst 3 = %d, want 3", got)
	}
}

func TestCheckShards(t *testing.T) {
	for _, s := range []int{0, -1, sharding.MaxShards + 1} {
		if sharding.CheckShards(s) == nil {
			t.Errorf("CheckShards(%d) = nil", s)
		}
	}
	if err := sharding.CheckShards(sharding.MaxShards); err != nil {
		t.Error(err)
	}
}

// TestPlaceSpreads checks that the parts of a key fall near the middles of
// distinct slices of the slot range, that they reach min(S, M) masters of
// a cluster whose M masters own equal ranges, and that PartKey's keyspace
// name hashes where Place says.
func TestPlaceSpreads(t *testing.T) {
	ks, _ := hybridlimit.NewKeyspace("p:")
	seen := make(map[string]string)
	for _, key := range []string{"a", "user:42", "{braced}", "%7B", "", "\x00\xff"} {
		for s := 1; s <= 16; s++ {
			slices := make(map[int]bool)
			for j := range s {
				tag := sharding.Place(hybridlimit.Escape(key), j, s)
				if prev, dup := seen[tag]; dup {
					t.Fatalf("tag %q of %q part %d/%d also belongs to %s", tag, key, j, s, prev)
				}
				seen[tag] = fmt.Sprintf("%q part %d/%d", key, j, s)
				slices[hybridlimit.Slot(tag)*s/hybridlimit.SlotCount] = true
				for m := 1; m <= 3; m++ {
					// Masters of an even split own [i*16384/m, (i+1)*16384/m).
					masters := make(map[int]bool)
					for jj := range s {
						masters[hybridlimit.Slot(sharding.Place(hybridlimit.Escape(key), jj, s))*m/hybridlimit.SlotCount] = true
					}
					if len(masters) != min(s, m) {
						t.Errorf("%q split %d ways reaches %d of %d masters", key, s, len(masters), m)
					}
				}
				if key == "" {
					continue // an empty key is refused before it is placed
				}
				name, err := ks.Key(sharding.PartKey(key, j, s), "gcra2")
				if err != nil {
					t.Fatal(err)
				}
				if hybridlimit.Slot(name) != hybridlimit.Slot(tag) {
					t.Errorf("PartKey(%q, %d, %d) names %q, not in the slot of %q", key, j, s, name, tag)
				}
			}
			if len(slices) != s {
				t.Errorf("%q split %d ways uses %d slices", key, s, len(slices))
			}
		}
	}
}

func TestGroupAndHome(t *testing.T) {
	const n = 64
	for g := range n {
		for s := 1; s <= 8; s++ {
			groups := make(map[int]bool)
			for j := range s {
				gj := sharding.Group(g, j, s, n)
				if gj < 0 || gj >= n {
					t.Fatalf("Group = %d", gj)
				}
				groups[gj] = true
			}
			if len(groups) != s || sharding.Group(g, 0, s, n) != g {
				t.Errorf("%d parts of group %d in groups %v", s, g, groups)
			}
		}
	}
	homes := make([]int, 4)
	for i := range 4000 {
		homes[sharding.Home(fmt.Sprint("instance-", i), "hot", 4)]++
	}
	for j, n := range homes {
		if n < 800 || n > 1200 {
			t.Errorf("home %d of 4 chosen by %d of 4000 instances", j, n)
		}
	}
}

// TestGroupSpreads counts, over every own group of 64 and the group's
// whole slot range (a group tag can hash anywhere in it), how often the
// parts of a key miss min(S, M) masters of M with equal ranges. With S
// other than M the steps leave room to spare: never. With S = M a part
// within one group of a boundary can share its neighbour's master.
func TestGroupSpreads(t *testing.T) {
	const n = 64
	width := hybridlimit.SlotCount / n
	for m := 1; m <= 3; m++ {
		for s := 1; s <= 8; s++ {
			missed, tried := 0, 0
			for g := range n {
				for off := 0; off < width; off += 16 {
					masters := make(map[int]bool)
					for j := range s {
						slot := sharding.Group(g, j, s, n)*width + off
						masters[slot*m/hybridlimit.SlotCount] = true
					}
					tried++
					if len(masters) < min(s, m) {
						missed++
					}
				}
			}
			share := float64(missed) / float64(tried)
			if s != m && missed > 0 || share > 0.05 {
				t.Errorf("S=%d M=%d: %d of %d placements miss a master", s, m, missed, tried)
			}
			if missed > 0 {
				t.Logf("S=%d M=%d: %.1f%% of placements reach fewer than %d masters", s, m, 100*share, min(s, m))
			}
		}
	}
}
