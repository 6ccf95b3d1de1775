package sync

import (
	stdsync "sync"
	"time"
)

// Clock is the time a Limiter decides, schedules and waits by (WithClock;
// the default is the system clock). Redis keeps its own for the buckets.
// Every wait of the limiter's passes only as its clock moves: the loop's
// ticks, the fetch linger, the max wait and Wait's sleeps.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in a goroutine of its own once d has passed,
	// unless stop, which reports whether it did, is called first.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// after returns a channel closed once d has passed on clk, and what stops
// the timer.
func after(clk Clock, d time.Duration) (<-chan struct{}, func() bool) {
	ch := make(chan struct{})
	return ch, clk.AfterFunc(d, func() { close(ch) })
}

// ticker ticks on a Clock every period, as a time.Ticker does: a tick a
// slow reader has not taken yet is not doubled, and the ticks keep their
// phase.
type ticker struct {
	c      chan struct{}
	clk    Clock
	period time.Duration

	mu      stdsync.Mutex
	next    time.Time
	stop    func() bool
	stopped bool
}

func newTicker(clk Clock, period time.Duration) *ticker {
	t := &ticker{c: make(chan struct{}, 1), clk: clk, period: period, next: clk.Now().Add(period)}
	t.mu.Lock() // the first tick may fire before AfterFunc returns
	defer t.mu.Unlock()
	t.stop = clk.AfterFunc(period, t.fire)
	return t
}

// fire arms the next tick, then ticks: a reader that acts on a tick
// finds the next one armed (a test that advances a fake clock on it would
// otherwise pass the next tick's time before it is set, and lose it), and
// a ticker stopped meanwhile ticks no more.
func (t *ticker) fire() {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	now := t.clk.Now()
	t.next = t.next.Add(t.period)
	if t.next.Before(now) { // ticks missed: on from now, in phase
		t.next = t.next.Add(now.Sub(t.next).Truncate(t.period) + t.period)
	}
	t.stop = t.clk.AfterFunc(t.next.Sub(now), t.fire)
	t.mu.Unlock()
	select {
	case t.c <- struct{}{}:
	default:
	}
}

// Stop stops the ticks.
func (t *ticker) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	t.stop()
}
