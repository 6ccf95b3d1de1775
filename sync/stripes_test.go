package sync

import (
	"runtime"
	stdsync "sync"
	"sync/atomic"
	"testing"
)

// spreadEntry returns an entry holding n tokens spread over its counters, and
// the limiter whose lock and unlock gather and spread them.
func spreadEntry(t *testing.T, n int64) (*Limiter, *entry) {
	t.Helper()
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one P: nothing is spread")
	}
	l := &Limiter{cfg: defaults()}
	l.cfg.stripeDemand = 0
	e := &entry{}
	l.lockGather(e)
	e.ledger.Give(&e.avail, n)
	l.scatterUnlock(e)
	if e.stripes.Load() == nil || e.avail.Load() == n {
		t.Fatalf("%d tokens not spread at stripe demand 0", n)
	}
	return l, e
}

// TestStripesKeepEveryToken spends a spread allowance from several
// goroutines while another plays the rounds: it gathers, reads the
// consumption, hands more out or takes some back, and scatters again. The
// consumption a round reads must never fall, and at the end must equal
// what the spenders took, with what is held making up the rest of what was
// issued.
func TestStripesKeepEveryToken(t *testing.T) {
	l, e := spreadEntry(t, 1000)
	var spent atomic.Int64
	stop := make(chan struct{})
	var wg stdsync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if e.spend(2) >= 0 {
					spent.Add(2)
				}
			}
		})
	}
	var last int64
	for i := range 10000 {
		l.lockGather(e)
		held, consumed := e.ledger.Snapshot(&e.avail)
		if consumed < last {
			t.Errorf("round %d: consumed fell from %d to %d", i, last, consumed)
		}
		last = consumed
		switch i % 3 {
		case 0:
			e.ledger.Give(&e.avail, 50)
		case 1:
			e.ledger.Withdraw(&e.avail, held/2)
		default:
			e.ledger.SetAllowance(&e.avail, func(int64) int64 { return held + 7 })
		}
		l.scatterUnlock(e)
	}
	close(stop)
	wg.Wait()
	l.lockGather(e)
	held, consumed := e.ledger.Snapshot(&e.avail)
	l.scatterUnlock(e)
	if consumed != spent.Load() {
		t.Errorf("consumed %d, spenders took %d", consumed, spent.Load())
	}
	if held+consumed != e.ledger.Issued {
		t.Errorf("held %d + consumed %d != issued %d", held, consumed, e.ledger.Issued)
	}
}

// TestStripesSpendEverything checks that a spread allowance is all there
// for a single spender: whatever its P, it steals from the others' counters
// and then from avail before it reports the allowance spent.
func TestStripesSpendEverything(t *testing.T) {
	_, e := spreadEntry(t, 101)
	n := 0
	for e.spend(1) >= 0 {
		n++
	}
	if n != 101 {
		t.Errorf("spent %d of 101", n)
	}
}

// TestStripesLeaveEvictedAlone checks that an evicted entry is not spread
// again, so that its marker in avail keeps every decision off it.
func TestStripesLeaveEvictedAlone(t *testing.T) {
	l := &Limiter{cfg: defaults()}
	l.cfg.stripeDemand = 0
	e := &entry{}
	l.lockGather(e)
	if !e.evict() {
		t.Fatal("evict failed on an empty entry")
	}
	l.scatterUnlock(e)
	if e.spend(1) >= 0 {
		t.Error("an evicted entry admitted a decision")
	}
	if e.stripes.Load() != nil {
		t.Error("an evicted entry was given stripes")
	}
}

// TestStripesPayLargeCosts checks that a cost more than any one counter
// holds, but no more than all of them, is paid by gathering them: spread
// thin, an allowance must not turn away a cost it covers.
func TestStripesPayLargeCosts(t *testing.T) {
	l, e := spreadEntry(t, 12)
	if n := e.spend(10); n >= 0 {
		t.Fatalf("spend(10) paid from one counter of a spread 12 (left %d): the test proves nothing", n)
	}
	if !e.fragmented(10) || e.fragmented(13) {
		t.Errorf("fragmented(10) = %v, fragmented(13) = %v; want true, false", e.fragmented(10), e.fragmented(13))
	}
	if n := l.pay(e, 10); n < 0 {
		t.Error("pay(10) could not pay from 12")
	}
	if n := l.pay(e, 3); n >= 0 {
		t.Errorf("pay(3) paid from the 2 left (left %d)", n)
	}
	l.lockGather(e)
	held, consumed := e.ledger.Snapshot(&e.avail)
	l.scatterUnlock(e)
	if held != 2 || consumed != 10 {
		t.Errorf("held %d, consumed %d; want 2, 10", held, consumed)
	}
}
