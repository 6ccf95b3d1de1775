package account

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// TestReserveSteps steps one Reserve key's accounting over rounds 250 ms
// apart: what each message asks, what it states, what its reply grants.
func TestReserveSteps(t *testing.T) {
	p := testPolicy()
	var issued, acked, held int64 // what the key was issued, Redis's total, what it holds
	for i, step := range []struct {
		spent   int64 // admitted since the last round
		waiting int64
		final   bool
		total   int64 // the reply's total granted
		// want:
		excess, more, value int64
		says                bool
		grant               int64
	}{
		// First round, two decisions waiting: it asks for its minimum
		// lease and what waits, and Redis grants all of it.
		{0, 2, false, 10, 0, 10, 10, true, 10},
		// 2 spent, 8 held: above its low mark (5), nothing to say.
		{2, 0, false, 10, 0, 0, 10, false, 0},
		// 5 more spent, 3 held: under the low mark, it tops up to 8.
		{5, 0, false, 15, 0, 5, 15, true, 5},
		// Closing: it hands all 8 back and asks for nothing.
		{0, 0, true, 7, 8, 0, 7, true, 0},
	} {
		held -= step.spent
		h := steady()
		h.Demand, h.Held = 0, held
		excess, more := p.ReserveAsk(h, step.waiting, step.final)
		held -= excess
		issued -= excess
		value := issued + more
		says := ReserveSays(value, acked, 0, false, i > 0, step.waiting)
		if excess != step.excess || more != step.more || value != step.value || says != step.says {
			t.Fatalf("round %d: ask %d back, %d more, value %d, says %v; want %d, %d, %d, %v",
				i, excess, more, value, says, step.excess, step.more, step.value, step.says)
		}
		grant := ReserveGrant(step.total, issued, 0)
		if grant != step.grant {
			t.Fatalf("round %d: grant %d, want %d", i, grant, step.grant)
		}
		issued += grant
		held += grant
		acked = step.total
	}
	if held != 0 || issued != acked {
		t.Fatalf("closed holding %d, issued %d, acked %d: want nothing held, all acknowledged", held, issued, acked)
	}
}

// TestReserveGrantCountsDebt checks that what the failure policy admitted
// is no grant of Redis's, and that a ledger raised past what the key heard
// of gives the difference.
func TestReserveGrantCountsDebt(t *testing.T) {
	for _, tt := range []struct{ total, issued, owed, want int64 }{
		{100, 100, 0, 0},
		{100, 120, 20, 0},  // 20 of the issued were the policy's: Redis granted 100
		{130, 120, 20, 30}, // Redis granted 30 more
		{90, 100, 0, 0},    // never less
	} {
		if got := ReserveGrant(tt.total, tt.issued, tt.owed); got != tt.want {
			t.Errorf("ReserveGrant(%d, %d, %d) = %d, want %d", tt.total, tt.issued, tt.owed, got, tt.want)
		}
	}
}

// TestOptimisticAllowanceSteps steps an Optimistic key with an overshoot
// budget over a grid of 250 ms rounds: an allowance is renewed a fifth of
// its life on, stops being spent half-way, and a reply that comes as late
// brings none.
func TestOptimisticAllowanceSteps(t *testing.T) {
	o := Optimistic{Budget: 0.1, Life: 10 * 250 * time.Millisecond} // 2.5 s
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	const grantAt = 0
	for _, step := range []struct {
		at                int64 // ms
		renewing, lapsing bool
	}{
		{250, false, false},
		{500, true, false}, // a fifth of 2.5 s
		{1000, true, false},
		{1250, true, true}, // half of it
		{2500, true, true},
	} {
		if got := o.Renewing(5, ms(step.at), grantAt); got != step.renewing {
			t.Errorf("at %dms: renewing %v, want %v", step.at, got, step.renewing)
		}
		if got := o.Lapsing(ms(step.at), grantAt); got != step.lapsing {
			t.Errorf("at %dms: lapsing %v, want %v", step.at, got, step.lapsing)
		}
	}
	if o.Renewing(0, ms(2500), grantAt) {
		t.Error("renewing with nothing held")
	}
	none := Optimistic{Budget: -1, Life: o.Life}
	if none.Lapsing(ms(10_000), 0) || none.Renewing(5, ms(10_000), 0) || none.Starved(scripts.SyncReply{}) || none.BudgetOf(1000) != -1 {
		t.Error("without a budget an allowance neither lapses, renews, nor starves")
	}
	if got := o.BudgetOf(1000); got != 100 {
		t.Errorf("budget of 1000 = %d, want 100", got)
	}
	// Reported 40 in all; 5 more admitted while the message was out; the
	// reply grants 20: 15 left to spend.
	if got := Allowance(20, 45, 40); got != 15 {
		t.Errorf("Allowance = %d, want 15", got)
	}
	if !o.Starved(scripts.SyncReply{}) || o.Starved(scripts.SyncReply{Allowance: 1}) {
		t.Error("starved: want only a reply that grants nothing")
	}
}

// TestOptimisticSays checks when an Optimistic message has something to
// report.
func TestOptimisticSays(t *testing.T) {
	if OptimisticSays(10, 10, true, false, false, false, false) {
		t.Error("nothing new: want no message")
	}
	for name, says := range map[string]bool{
		"first":    OptimisticSays(0, 0, false, false, false, false, false),
		"repeat":   OptimisticSays(10, 10, true, true, false, false, false),
		"new":      OptimisticSays(11, 10, true, false, false, false, false),
		"final":    OptimisticSays(10, 10, true, false, true, false, false),
		"renewing": OptimisticSays(10, 10, true, false, false, true, false),
		"flagged":  OptimisticSays(10, 10, true, false, false, false, true),
	} {
		if !says {
			t.Errorf("%s: want a message", name)
		}
	}
}

func TestKeep(t *testing.T) {
	p := testPolicy()
	h := steady() // lease 100
	if got := p.Keep(h, 5); got != 105 {
		t.Errorf("Keep = %d, want 105", got)
	}
	h.Serving = false // no lease: the minimum one
	if got := p.Keep(h, 0); got != 8 {
		t.Errorf("Keep not serving = %d, want 8", got)
	}
	h.Limit = hybridlimit.Limit{Rate: 1, Period: time.Second, Burst: 1}
	if got := p.Keep(h, 0); got != 1 {
		t.Errorf("Keep of a burst of 1 = %d, want 1", got)
	}
}

// TestEmptyUntil checks how long a key denies after Redis said its bucket
// is empty, at 1 s with a token due in 10 ms and the next round at 1.25 s.
func TestEmptyUntil(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	const interval = 250 * time.Millisecond
	for _, tt := range []struct {
		name          string
		retry         int64
		leased, moved bool
		want          int64
	}{
		{"low limit: until the token", ms(10), false, false, ms(1010)},
		{"leased: until the next round", ms(10), true, false, ms(1250)},
		{"leased, token later than the round", ms(5000), true, false, ms(6000)},
		{"moved layout: an interval at most", ms(5000), true, true, ms(1250)},
		{"moved layout, low limit: the token if sooner", ms(10), false, true, ms(1010)},
	} {
		if got := EmptyUntil(ms(1000), tt.retry, ms(1250), tt.leased, tt.moved, interval); got != tt.want {
			t.Errorf("%s: EmptyUntil = %v, want %v", tt.name, time.Duration(got), time.Duration(tt.want))
		}
	}
}
