package clock

import (
	"testing"
	"time"
)

// TestVirtual checks that a Virtual clock reads what it is set to, calls
// a function once the clock passes its time, and not one stopped first.
func TestVirtual(t *testing.T) {
	start := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(start)
	fired := make(chan int, 2)
	c.AfterFunc(time.Second, func() { fired <- 1 })
	stop := c.AfterFunc(2*time.Second, func() { fired <- 2 })
	c.Advance(999 * time.Millisecond)
	if got := c.Now(); !got.Equal(start.Add(999 * time.Millisecond)) {
		t.Fatalf("Now = %v after Advance", got)
	}
	select {
	case n := <-fired:
		t.Fatalf("timer %d fired before its time", n)
	case <-time.After(50 * time.Millisecond):
	}
	c.Set(start.Add(time.Second))
	if n := <-fired; n != 1 {
		t.Fatalf("timer %d fired, want 1", n)
	}
	if !stop() {
		t.Fatal("stop of a pending timer reported false")
	}
	if stop() {
		t.Fatal("second stop reported true")
	}
	c.Advance(time.Hour)
	select {
	case n := <-fired:
		t.Fatalf("timer %d fired after stop", n)
	case <-time.After(50 * time.Millisecond):
	}
}
