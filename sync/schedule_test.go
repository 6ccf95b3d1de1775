package sync

import (
	"slices"
	"testing"
)

// TestSchedulePopsEachEntryOnceAtItsTick drives the wheel by hand: an
// entry comes out at the tick that holds its time and not before, once
// however often it was rescheduled, at its latest time; a time in the past
// means the next tick; after a pause longer than the wheel every entry
// comes out; a time beyond the wheel waits in its last slot.
func TestSchedulePopsEachEntryOnceAtItsTick(t *testing.T) {
	const tick = 10
	s := schedule{tick: tick}
	mk := func(name string) *entry { return &entry{key: name, due: -1} }
	names := func(es []*entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.key)
		}
		slices.Sort(out)
		return out
	}
	a, b, c, d := mk("a"), mk("b"), mk("c"), mk("d")
	s.at(a, 5)   // tick 0
	s.at(b, 25)  // tick 2
	s.at(c, 25)  // tick 2, then moved
	s.at(c, 45)  // tick 4
	s.at(d, -70) // in the past: tick 0
	if got := names(s.pop(9, nil)); !slices.Equal(got, []string{"a", "d"}) {
		t.Errorf("take at 9 = %v, want [a d]", got)
	}
	if got := s.pop(19, nil); len(got) != 0 {
		t.Errorf("take at 19 = %v, want nothing", names(got))
	}
	s.at(a, 0) // the past again: the next tick not taken, 2
	if got := names(s.pop(29, nil)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("take at 29 = %v, want [a b]", got)
	}
	if got := names(s.pop(49, nil)); !slices.Equal(got, []string{"c"}) {
		t.Errorf("take at 49 = %v, want [c] once", got)
	}
	if a.due != -1 || c.due != -1 {
		t.Errorf("due after take = %d, %d; want -1", a.due, c.due)
	}

	// Beyond the wheel: waits in the last slot, which comes first.
	far := mk("far")
	s.at(far, 1_000_000)
	if far.due != s.next+wheelSlots-1 {
		t.Errorf("far entry due at tick %d, want the wheel's last %d", far.due, s.next+wheelSlots-1)
	}
	// A pause of many wheels: everything comes out, and the wheel goes on
	// from the present.
	e := mk("e")
	s.at(e, 60)
	if got := names(s.pop(100_000, []*entry{mk("flagged")})); !slices.Equal(got, []string{"e", "far", "flagged"}) {
		t.Errorf("take after a pause = %v, want [e far flagged]", got)
	}
	if s.next != 100_000/tick+1 {
		t.Errorf("next tick after the pause = %d, want %d", s.next, 100_000/tick+1)
	}
	s.at(e, 100_005)
	if got := names(s.pop(100_019, nil)); !slices.Equal(got, []string{"e"}) {
		t.Errorf("take after the pause = %v, want [e]", got)
	}
}
