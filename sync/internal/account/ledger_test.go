package account

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// plain is a Counter no other goroutine touches: what a decision's
// subtraction leaves, with nothing ever being put back.
type plain int64

func (p *plain) Load() int64     { return int64(*p) }
func (p *plain) Held() int64     { return max(int64(*p), 0) }
func (p *plain) Deposit(n int64) { *p += plain(n) }
func (p *plain) Take(n int64) int64 {
	t := min(n, p.Held())
	*p -= plain(t)
	return t
}
func (p *plain) Swap(to func(int64) int64) (from, set int64, ok bool) {
	from = int64(*p)
	*p = plain(to(from))
	return from, int64(*p), true
}

// ledgerStep is one round of a key's ledger on a 250 ms grid: what
// decisions spend before the message is composed and while it is out, the
// reply (or none), and what the message and the ledger must then be.
type ledgerStep struct {
	at             int64 // ms
	spend, spendIn int64 // admitted before composing; while the message is out
	waiting        int64 // cost of decisions waiting for the round
	final          bool
	lost           bool              // the reply does not come
	reply          scripts.SyncReply // if it does
	unused         time.Duration     // since consumption was last seen
	full           bool              // the bucket is full by Redis's last word
	// want:
	says              bool
	value, held       int64 // the message's
	let               int64 // granted and let go
	avail, issued, ok int64 // after the reply: the counter, Issued, Acked
}

// runLedger plays steps on one ledger in mode and checks each.
func runLedger(t *testing.T, mode Mode, steps []ledgerStep) {
	t.Helper()
	var (
		l      Ledger
		c      plain
		synced bool
	)
	for i, s := range steps {
		now := s.at * int64(time.Millisecond)
		c -= plain(s.spend)
		l.Waiting = s.waiting
		mode.Lapse(&l, &c, now)
		h := steady()
		h.Demand, h.Held, h.Unused, h.Full = 0, c.Held(), s.unused, s.full
		k := Look{T: now, Holding: h, Synced: synced}
		m, says, let := l.Compose(mode, &c, k, perSecond1000, s.final)
		l.Waiting = 0
		if says != s.says || says && (m.Value != s.value || m.Held != s.held) || let != s.let {
			t.Fatalf("step %d (%d ms): says %v, value %d, held %d, let go %d; want %v, %d, %d, %d",
				i, s.at, says, m.Value, m.Held, let, s.says, s.value, s.held, s.let)
		}
		if says {
			l.Sending(now)
			c -= plain(s.spendIn)
			l.Answered(!s.lost)
			if !s.lost {
				l.Apply(mode, &c, Look{T: now}, m, s.reply)
				synced = true
			}
		}
		if int64(c) != s.avail || l.Issued != s.issued || l.Acked != s.ok {
			t.Fatalf("step %d (%d ms): avail %d, issued %d, acked %d; want %d, %d, %d",
				i, s.at, c, l.Issued, l.Acked, s.avail, s.issued, s.ok)
		}
		if says && l.Unacked != s.lost {
			t.Fatalf("step %d: unacked %v after a reply lost %v", i, l.Unacked, s.lost)
		}
	}
}

// TestLedgerReserveSteps steps a Reserve key through a first ask, a quiet
// round, a top-up whose reply is lost (Redis granted it), the repeat that
// recovers the grant without counting it twice, and Close, which hands
// everything back.
func TestLedgerReserveSteps(t *testing.T) {
	total := func(n int64) scripts.SyncReply { return scripts.SyncReply{Total: n, Remaining: 1000 - n} }
	runLedger(t, Reserve{Policy: testPolicy()}, []ledgerStep{
		// Two decisions wait: the minimum lease and what waits.
		{at: 0, waiting: 2, reply: total(10), says: true, value: 10, avail: 10, issued: 10, ok: 10},
		// 2 spent, 8 held, above the low mark: nothing to say.
		{at: 250, spend: 2, says: false, avail: 8, issued: 10, ok: 10},
		// 5 more spent, 3 held: it asks 5 more; Redis grants, the reply is lost.
		{at: 500, spend: 5, lost: true, says: true, value: 15, avail: 3, issued: 10, ok: 10},
		// The same message again: the reply's total brings the grant once.
		{at: 750, reply: total(15), says: true, value: 15, avail: 8, issued: 15, ok: 15},
		// Closing: all 8 handed back, taken from the counter before the message goes.
		{at: 1000, final: true, reply: total(7), says: true, value: 7, avail: 0, issued: 7, ok: 7},
	})
}

// TestLedgerReserveIdle steps two Reserve keys past the idle hold (10 s
// on the test policy's grid) holding 8 of a grant of 9: one whose bucket
// Redis last said was short of full, which hands the 8 back, and one whose
// bucket has refilled since, which lets them go, granted all the same, and
// has nothing to say. Either way it holds nothing after, and nothing is
// due.
func TestLedgerReserveIdle(t *testing.T) {
	total := func(n int64) scripts.SyncReply { return scripts.SyncReply{Total: n, Remaining: 1000 - n} }
	idle := 10 * time.Second
	for _, full := range []bool{false, true} {
		steps := []ledgerStep{
			// A decision waits: its cost and the minimum lease.
			{at: 0, waiting: 1, reply: total(9), says: true, value: 9, avail: 9, issued: 9, ok: 9},
			{at: 250, spend: 1, says: false, avail: 8, issued: 9, ok: 9},
		}
		last := ledgerStep{at: 10250, unused: idle, full: full}
		if full {
			last.says, last.let, last.issued, last.ok = false, 8, 9, 9
		} else {
			last.reply, last.says, last.value, last.issued, last.ok = total(1), true, 1, 1, 1
		}
		runLedger(t, Reserve{Policy: testPolicy()}, append(steps, last))
	}
}

// TestLedgerOptimisticSteps steps an Optimistic key without a budget: a
// first report, a report with decisions admitted while it was out (the
// allowance counts from what the message carried), a lost reply and its
// repeat, and Close, which reports all and keeps nothing.
func TestLedgerOptimisticSteps(t *testing.T) {
	o := Optimistic{Policy: testPolicy(), Budget: -1, Life: 2500 * time.Millisecond}
	grant := func(total, allowance int64) scripts.SyncReply {
		return scripts.SyncReply{Total: total, Allowance: allowance, Remaining: allowance}
	}
	runLedger(t, o, []ledgerStep{
		{at: 0, reply: grant(0, 100), says: true, value: 0, held: 0, avail: 100, issued: 100, ok: 0},
		// 30 reported, 5 more admitted meanwhile: 95 granted less those 5.
		{at: 250, spend: 30, spendIn: 5, reply: grant(30, 95), says: true, value: 30, held: 70, avail: 90, issued: 125, ok: 30},
		// The 5 go unreported until this round.
		{at: 500, reply: grant(35, 90), says: true, value: 35, held: 90, avail: 90, issued: 125, ok: 35},
		{at: 750, spend: 10, lost: true, says: true, value: 45, held: 80, avail: 80, issued: 125, ok: 35},
		{at: 1000, reply: grant(45, 50), says: true, value: 45, held: 80, avail: 50, issued: 95, ok: 45},
		// Everything reported, nothing to renew without a budget: nothing to say.
		{at: 1250, says: false, avail: 50, issued: 95, ok: 45},
		// Closing: the allowance goes before the report, which records none.
		{at: 1500, final: true, reply: grant(45, 0), says: true, value: 45, held: -1, avail: 0, issued: 45, ok: 45},
	})
}

// TestLedgerOptimisticLateReplyGrantsNothing checks that under a budget
// a reply coming half an allowance's life after its message grants
// nothing (it may have lapsed in Redis and gone to others), and that an
// allowance not renewed by then is withdrawn before the next message.
func TestLedgerOptimisticLateReplyGrantsNothing(t *testing.T) {
	o := Optimistic{Policy: testPolicy(), Budget: 0.1, Life: 2500 * time.Millisecond}
	var l Ledger
	var c plain
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	k := Look{T: 0, Holding: steady()}
	m, says, _ := l.Compose(o, &c, k, perSecond1000, false)
	if !says {
		t.Fatal("a first report says nothing")
	}
	l.Sending(0)
	l.Answered(true)
	l.Apply(o, &c, Look{T: ms(1250)}, m, scripts.SyncReply{Allowance: 50, Remaining: 50})
	if c != 0 || l.Issued != 0 {
		t.Fatalf("a reply half a life late granted %d (issued %d)", c, l.Issued)
	}
	l.Apply(o, &c, Look{T: ms(1249)}, m, scripts.SyncReply{Allowance: 50, Remaining: 50})
	if c != 50 || l.Issued != 50 {
		t.Fatalf("a reply on time granted %d (issued %d), want 50", c, l.Issued)
	}
	o.Lapse(&l, &c, ms(1249)) // granted at 0: still spendable
	if c != 50 {
		t.Fatalf("lapsed early: %d left", c)
	}
	o.Lapse(&l, &c, ms(1250))
	if c != 0 || l.Issued != 0 {
		t.Fatalf("half a life on, %d left to spend (issued %d)", c, l.Issued)
	}
}
