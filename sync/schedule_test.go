package sync

import (
	"slices"
	"testing"
)

// TestSchedulePopsEachEntryOnceAtItsTick drives the wheel by hand: an
// entry comes out at the tick that holds its time and not before, once
// however often it was rescheduled, at its latest time; a time in the past
// means the next tick; after a pause longer than the wheel every entry
// comes out; a time beyond the wheel waits in its last slot. Within a
// tick, entries come out in the order they were scheduled for it.
func TestSchedulePopsEachEntryOnceAtItsTick(t *testing.T) {
	const tick = 10
	var s schedule
	s.init(tick)
	mk := func(name string) *entry { return &entry{key: name} }
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
	if a.due != (dueLink{}) || c.due != (dueLink{}) {
		t.Errorf("due after take = %v, %v; want out of the wheel", a.due, c.due)
	}

	// Beyond the wheel: waits in the last slot, which comes first.
	far := mk("far")
	s.at(far, 1_000_000)
	if last := int8((s.next + wheelSlots - 1) % wheelSlots); far.dueSlot != last {
		t.Errorf("far entry in slot %d, want the wheel's last, %d", far.dueSlot, last)
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

// TestScheduleOrderWithinATick: entries of one tick come out in the order
// they were scheduled for it; one scheduled again for the same tick keeps
// its place, one moved from another tick joins the end.
func TestScheduleOrderWithinATick(t *testing.T) {
	const tick = 10
	var s schedule
	s.init(tick)
	a, b, c, d := &entry{key: "a"}, &entry{key: "b"}, &entry{key: "c"}, &entry{key: "d"}
	s.at(a, 15)
	s.at(d, 25) // tick 2, then moved to 1
	s.at(b, 12)
	s.at(c, 18)
	s.at(a, 11) // the same tick: stays first
	s.at(d, 10) // moved: last
	var got []string
	for _, e := range s.pop(19, nil) {
		got = append(got, e.key)
	}
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
	if got := s.pop(1000, nil); len(got) != 0 {
		t.Errorf("the moved entry came out again: %d entries", len(got))
	}
}
