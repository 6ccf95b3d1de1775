package sync

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/clock"
)

// TestTickerOnClock checks that the loop's ticker ticks on its clock, in
// phase, dropping the ticks a reader has not taken, and stops.
func TestTickerOnClock(t *testing.T) {
	clk := clock.New(time.Now())
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
