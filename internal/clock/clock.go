// Package clock is the virtual clock that the hybrid limiter's tests and
// the simulator run limiters on (package sync's Clock): it reads what its
// owner sets, and calls the functions of AfterFunc when the time set
// passes theirs.
package clock

import (
	"slices"
	stdsync "sync"
	"time"
)

// Virtual is a clock that moves only when it is told to (Set, Advance).
// Safe for concurrent use.
type Virtual struct {
	mu     stdsync.Mutex
	now    time.Time
	timers []*timer // in the order they were made
}

type timer struct {
	at time.Time
	f  func()
}

// New returns a Virtual clock reading t.
func New(t time.Time) *Virtual { return &Virtual{now: t} }

// Now returns the clock's time.
func (c *Virtual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d (back, for a negative d), as Set does.
func (c *Virtual) Advance(d time.Duration) {
	c.move(func(now time.Time) time.Time { return now.Add(d) })
}

// Set moves the clock to t and calls, each in a goroutine of its own, the
// functions whose time has come.
func (c *Virtual) Set(t time.Time) {
	c.move(func(time.Time) time.Time { return t })
}

// move sets the clock to to(now) and calls the functions due then.
func (c *Virtual) move(to func(now time.Time) time.Time) {
	c.mu.Lock()
	c.now = to(c.now)
	var due []*timer
	c.timers = slices.DeleteFunc(c.timers, func(tm *timer) bool {
		if tm.at.After(c.now) {
			return false
		}
		due = append(due, tm)
		return true
	})
	c.mu.Unlock()
	for _, tm := range due {
		go tm.f()
	}
}

// AfterFunc calls f once the clock has moved d past now, unless stop,
// which reports whether it did, is called first.
func (c *Virtual) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &timer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := len(c.timers)
		c.timers = slices.DeleteFunc(c.timers, func(x *timer) bool { return x == tm })
		return len(c.timers) < n
	}
}
