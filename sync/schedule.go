package sync

import stdsync "sync"

// wheelSlots is how many loop ticks ahead the schedule reaches: far more
// than any entry waits (a key syncs at least every sync interval plus its
// jitter, four ticks and a bit). An entry due further out waits in the
// last slot, and its round finds it has nothing to say yet.
const wheelSlots = 64

// schedule holds the entries waiting for their next sync in a timing wheel
// of loop ticks, so that a round visits the entries due and not every
// entry tracked: with 100,000 keys a tick costs what it sends.
//
// Each slot is a circular list of the entries due at its tick, linked
// through the entries themselves (entry.due), so the wheel holds no memory
// per key beyond the entry's two links, however often a key is rescheduled.
// An entry is in the wheel at most once: rescheduled to another tick it
// moves to the end of that tick's list; to the tick it waits for, it
// stays where it is. An entry that is not in it is in flight, and its
// reply schedules it again; or it holds nothing, and the decision that
// next wants allowance flags it; or it is retired.
type schedule struct {
	mu    stdsync.Mutex
	tick  int64             // nanoseconds a slot spans
	next  int64             // the first tick whose slot has not been taken
	slots [wheelSlots]entry // each the head of its tick's list, an entry of no key
}

// dueLink is an entry's place in the wheel: its neighbours in its slot's
// list, nil when out of the wheel. (Its slot, entry.dueSlot, names the tick
// it waits for: every tick the wheel holds has a slot of its own.)
type dueLink struct{ prev, next *entry }

// init sets the wheel's tick, every slot's list empty.
func (s *schedule) init(tick int64) {
	s.tick = tick
	for i := range s.slots {
		h := &s.slots[i]
		h.due.prev, h.due.next = h, h
	}
}

// at schedules e for the tick that holds t, nanoseconds of the limiter's
// clock, or for the next tick not yet taken if that one is past.
func (s *schedule) at(e *entry, t int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := min(max(t/s.tick, s.next), s.next+wheelSlots-1)
	slot := int8(k % wheelSlots)
	if e.due.next != nil {
		if e.dueSlot == slot {
			return
		}
		e.due.prev.due.next, e.due.next.due.prev = e.due.next, e.due.prev
	}
	h := &s.slots[slot]
	e.due, e.dueSlot = dueLink{prev: h.due.prev, next: h}, slot
	h.due.prev.due.next = e
	h.due.prev = e
}

// pop appends to due the entries scheduled for the ticks up to the one
// that holds t, and unschedules them.
func (s *schedule) pop(t int64, due []*entry) []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := t / s.tick
	for n := 0; s.next <= last && n < wheelSlots; n++ {
		h := &s.slots[s.next%wheelSlots]
		for e := h.due.next; e != h; {
			next := e.due.next
			e.due = dueLink{}
			due = append(due, e)
			e = next
		}
		h.due.prev, h.due.next = h, h
		s.next++
	}
	// After a long pause every slot has been taken: the ticks between hold
	// nothing.
	s.next = max(s.next, last+1)
	return due
}
