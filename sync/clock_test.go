package sync

import (
	"slices"
	stdsync "sync"
	"testing"
	"time"
)

// FakeClock is the tests' Clock: it reads what they set, and calls the
// functions of AfterFunc when Advance passes their time. Safe for
// concurrent use.
type FakeClock struct {
	mu     stdsync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at time.Time
	f  func()
}

// NewFakeClock returns a FakeClock at the present.
func NewFakeClock() *FakeClock { return &FakeClock{now: time.Now()} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d (back, for a negative d) and calls, each in
// a goroutine of its own, the functions whose time has come.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool {
		if t.at.After(c.now) {
			return false
		}
		due = append(due, t)
		return true
	})
	c.mu.Unlock()
	for _, t := range due {
		go t.f()
	}
}

// AfterFunc calls f once Advance has moved the clock d on.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := len(c.timers)
		c.timers = slices.DeleteFunc(c.timers, func(x *fakeTimer) bool { return x == t })
		return len(c.timers) < n
	}
}

// TestTickerOnClock checks that the loop's ticker ticks on its clock, in
// phase, dropping the ticks a reader has not taken, and stops.
func TestTickerOnClock(t *testing.T) {
	clk := NewFakeClock()
	tk := newTicker(clk, time.Second)
	ticked := func() bool {
		select {
		case <-tk.c:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}
	clk.Advance(999 * time.Millisecond)
	if ticked() {
		t.Fatal("ticked before its period")
	}
	clk.Advance(time.Millisecond)
	if !ticked() {
		t.Fatal("no tick after a period")
	}
	clk.Advance(3500 * time.Millisecond) // three ticks due: one kept
	if !ticked() || ticked() {
		t.Fatal("want one tick for three periods missed")
	}
	clk.Advance(500 * time.Millisecond) // at 5 s: in phase
	if !ticked() {
		t.Fatal("no tick at the next period's end")
	}
	tk.Stop()
	clk.Advance(10 * time.Second)
	if ticked() {
		t.Fatal("ticked after Stop")
	}
}
