package sync

import (
	"testing"
	"time"
	"unsafe"

	"github.com/hybridlimit/hybridlimit"
)

// TestEntryWithdrawNeverAdds pins the bug where a raw negative reading of
// avail (a decision about to put back a cost it could not pay) passed to
// Withdraw added a token to the books.
func TestEntryWithdrawNeverAdds(t *testing.T) {
	var e entry
	e.ledger.Give(&e.avail, 3)
	for _, n := range []int64{-5, -1, 0} {
		if got := e.ledger.Withdraw(&e.avail, n); got != 0 || e.avail.Load() != 3 || e.ledger.Issued != 3 {
			t.Errorf("withdraw(%d) = %d, avail %d, issued %d; want 0, 3, 3", n, got, e.avail.Load(), e.ledger.Issued)
		}
	}
	if got := e.ledger.Withdraw(&e.avail, 5); got != 3 || e.avail.Load() != 0 || e.ledger.Issued != 0 {
		t.Errorf("withdraw(5) = %d, avail %d, issued %d; want 3, 0, 0", got, e.avail.Load(), e.ledger.Issued)
	}
}

// TestEntrySetAllowanceCountsFromOneReading checks that SetAllowance
// computes the new allowance from the same reading of avail that it
// replaces.
func TestEntrySetAllowanceCountsFromOneReading(t *testing.T) {
	var e entry
	e.ledger.Give(&e.avail, 10)
	e.avail.Add(-4) // four admitted
	e.ledger.SetAllowance(&e.avail, func(consumed int64) int64 {
		if consumed != 4 {
			t.Errorf("setAllowance saw consumed %d, want 4", consumed)
		}
		return 7
	})
	if held, consumed := e.ledger.Snapshot(&e.avail); held != 7 || consumed != 4 {
		t.Errorf("after setAllowance: held %d, consumed %d; want 7, 4", held, consumed)
	}
}

// TestEntryLayout checks what the hot path relies on: the words a
// decision reads and writes together on the first cache line, and a size
// that is a multiple of 64 so entries start on a line.
func TestEntryLayout(t *testing.T) {
	var e entry
	if size := unsafe.Sizeof(e); size%64 != 0 {
		t.Errorf("entry is %d bytes, not a multiple of 64", size)
	}
	for name, end := range map[string]uintptr{
		"avail": unsafe.Offsetof(e.avail) + 8, "key": unsafe.Offsetof(e.key) + 16,
		"limit": unsafe.Offsetof(e.limit) + 8, "remaining": unsafe.Offsetof(e.remaining) + 8,
		"resetAfter": unsafe.Offsetof(e.resetAfter) + 8, "stripes": unsafe.Offsetof(e.stripes) + 8,
		"marks": unsafe.Offsetof(e.marks) + 4, "rideBelow": unsafe.Offsetof(e.rideBelow) + 4,
	} {
		if end > 64 {
			t.Errorf("%s ends at %d, outside the first cache line", name, end)
		}
	}
}

// TestMaxCostIsSmallestPart checks the bound both decision paths use
// against the parts themselves: the smallest part's burst.
func TestMaxCostIsSmallestPart(t *testing.T) {
	for _, burst := range []int64{1, 2, 5, 7, 64, 100, 1001, 1 << 40} {
		limit := hybridlimit.Limit{Rate: burst, Period: time.Second, Burst: burst}
		for s := 1; s <= 64 && int64(s) <= burst; s++ {
			e := &entry{place: place{shards: int16(s)}}
			smallest := partOf(limit, 0, s).Burst
			for j := range s {
				smallest = min(smallest, partOf(limit, j, s).Burst)
			}
			if got := e.maxCost(limit); got != smallest {
				t.Errorf("burst %d split %d ways: maxCost %d, smallest part's burst %d", burst, s, got, smallest)
			}
		}
	}
}
