package sync

import (
	stdsync "sync"
	"time"
)

// heatSlots is the size of the hot-key sketch: a key that sends more than
// one message in heatSlots of a window's is sure to be counted.
const heatSlots = 64

// heat counts sync messages per key over a check window with the
// Space-Saving sketch: heatSlots counters; a key without one takes the
// smallest, inheriting its count as possible over-count. Memory stays
// fixed however many keys sync, and every key that sends more than
// 1/heatSlots of the messages is counted, within the smallest count.
type heat struct {
	mu     stdsync.Mutex
	counts map[string][2]int64 // key -> count, over-count
	start  time.Time
}

func (h *heat) add(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.counts[key]; ok {
		h.counts[key] = [2]int64{c[0] + 1, c[1]}
		return
	}
	if h.counts == nil {
		h.counts = make(map[string][2]int64, heatSlots)
	}
	if len(h.counts) < heatSlots {
		h.counts[key] = [2]int64{1, 0}
		return
	}
	// The smallest count goes, the smallest key among equals, so that a
	// simulation in virtual time replays exactly.
	victim, least := "", int64(-1)
	for k, c := range h.counts {
		if least < 0 || c[0] < least || c[0] == least && k < victim {
			victim, least = k, c[0]
		}
	}
	delete(h.counts, victim)
	h.counts[key] = [2]int64{least + 1, least}
}

// drain returns the counted keys with the messages each surely sent since
// the last drain, and the time since then, and starts a new window; or
// nothing if the window is younger than least.
func (h *heat) drain(now time.Time, least time.Duration) (map[string]int64, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	window := now.Sub(h.start)
	if h.start.IsZero() {
		h.start = now
		return nil, 0
	}
	if window < least {
		return nil, 0
	}
	out := make(map[string]int64, len(h.counts))
	for k, c := range h.counts {
		out[k] = c[0] - c[1]
	}
	h.counts, h.start = nil, now
	return out, window
}

// coolness tracks, per split key, since when it has been cool and when its
// markers were last renewed.
type coolness struct {
	mu   stdsync.Mutex
	keys map[string]*coolState
}

type coolState struct{ since, renewed time.Time }

func (c *coolness) state(key string, now time.Time) *coolState {
	if c.keys == nil {
		c.keys = make(map[string]*coolState)
	}
	s := c.keys[key]
	if s == nil {
		s = &coolState{renewed: now}
		c.keys[key] = s
	}
	return s
}

// note records whether key is cool now and returns since when it has been,
// or the zero time if it is not.
func (c *coolness) note(key string, now time.Time, cool bool) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.state(key, now)
	switch {
	case !cool:
		s.since = time.Time{}
	case s.since.IsZero():
		s.since = now
	}
	return s.since
}

// renewDue reports whether key's markers were last renewed at least every
// ago, and if so counts them renewed now.
func (c *coolness) renewDue(key string, now time.Time, every time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.state(key, now)
	if now.Sub(s.renewed) < every {
		return false
	}
	s.renewed = now
	return true
}

func (c *coolness) delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.keys, key)
}
