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
// An entry is in the wheel at most once, at its due tick: a copy left in
// another slot by a reschedule is skipped when that slot comes up. An
// entry that is not in it is in flight, and its reply schedules it again;
// or it holds nothing, and the decision that next wants allowance flags
// it; or it is retired.
type schedule struct {
	mu    stdsync.Mutex
	tick  int64 // nanoseconds a slot spans
	next  int64 // the first tick whose slot has not been taken
	slots [wheelSlots][]*entry
}

// at schedules e for the tick that holds t, nanoseconds of the limiter's
// clock, or for the next tick not yet taken if that one is past.
func (s *schedule) at(e *entry, t int64) {
	s.mu.Lock()
	k := min(max(t/s.tick, s.next), s.next+wheelSlots-1)
	e.due = k
	s.slots[k%wheelSlots] = append(s.slots[k%wheelSlots], e)
	s.mu.Unlock()
}

// pop appends to due the entries scheduled for the ticks up to the one
// that holds t, and unschedules them.
func (s *schedule) pop(t int64, due []*entry) []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := t / s.tick
	for n := 0; s.next <= last && n < wheelSlots; n++ {
		i := s.next % wheelSlots
		for _, e := range s.slots[i] {
			if e.due == s.next {
				due = append(due, e)
				e.due = -1
			}
		}
		clear(s.slots[i])
		s.slots[i] = s.slots[i][:0]
		s.next++
	}
	// After a long pause every slot has been taken: the ticks between hold
	// nothing.
	s.next = max(s.next, last+1)
	return due
}
