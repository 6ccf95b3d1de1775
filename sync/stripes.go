package sync

import (
	"math/bits"
	"runtime"
	"sync/atomic"
	_ "unsafe" // for go:linkname
)

// stripes spread a hot key's local allowance over one counter per P (the
// runtime's processor, of which GOMAXPROCS run Go code at once), each on a
// cache line of its own. A decision spends from its P's counter, a line
// its CPU keeps, instead of contending with every other CPU for the one
// line of entry.avail, which costs a hot key's decision more than all else
// it does (bench/RESULTS.md).
//
// Only holders of the entry's mutex move tokens into the counters
// (scatter), and each takes them all back first (gather), so a round reads
// avail and issued as if there were no stripes. Decisions only take tokens
// out (or put back, at once, a cost they could not pay).
type stripes struct {
	mask  int
	cells []stripe
	// elsewhere is what the last scatter left outside any one counter:
	// added to what a decision finds in its own, it makes Result.Remaining
	// what this instance held at the last sync, less what it spent.
	elsewhere atomic.Int64
}

// stripe is one counter, padded to a cache line so that neighbours do not
// share it. A slice of them is a multiple of 64 bytes, which the allocator
// aligns to a line.
type stripe struct {
	n atomic.Int64
	_ [56]byte
}

// maxStripes bounds the counters of one key, and so the memory a hot key
// costs on a machine with many CPUs (64 bytes each); Ps beyond it share.
const maxStripes = 64

// newStripes returns counters for the current GOMAXPROCS, or nil when one
// P runs Go code and there is nothing to contend with.
func newStripes() *stripes {
	procs := runtime.GOMAXPROCS(0)
	if procs < 2 {
		return nil
	}
	n := min(1<<bits.Len(uint(procs-1)), maxStripes)
	return &stripes{mask: n - 1, cells: make([]stripe, n)}
}

// procPin and procUnpin are the runtime's, as sync.Pool uses them to find
// its per-P cache: procPin returns the current P's index and keeps the
// goroutine on it until procUnpin. The runtime keeps both for packages
// outside it (go.dev/issue/67401). Pinned only while reading the index,
// a goroutine may move before it spends; that costs a shared line once,
// never a token.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// lockGather takes e.mu and gathers e's spread allowance back into avail,
// so that what the holder reads of avail is all the allowance there is.
func (l *Limiter) lockGather(e *entry) {
	e.mu.Lock()
	e.gather()
}

// scatterUnlock spreads e's allowance over its counters, first giving them
// to a key whose demand has reached Tuning.StripeDemand, and releases e.mu.
func (l *Limiter) scatterUnlock(e *entry) {
	if e.stripes.Load() == nil && e.ledger.Use.Rate >= l.cfg.stripeDemand && !e.isDead() {
		if s := newStripes(); s != nil {
			e.stripes.Store(s)
		}
	}
	e.scatter()
	e.mu.Unlock()
}

// own returns the counter of the caller's P.
func (s *stripes) own() *stripe {
	p := procPin()
	procUnpin()
	return &s.cells[p&s.mask]
}

// spend takes cost from the local allowance, from the caller's P's
// counter if the key is spread, else or failing that from avail, and
// reports what is left of it as of the last sync. A negative result means
// the allowance could not pay, and nothing was taken.
func (e *entry) spend(cost int64) int64 {
	s := e.stripes.Load()
	if s != nil {
		// Read before subtracting: a dry counter is left untouched, never
		// below zero, so a round gathering or spreading tokens does not
		// wait on decisions that find nothing.
		if c := s.own(); c.n.Load() >= cost {
			if n := c.n.Add(-cost); n >= 0 {
				return n + s.elsewhere.Load()
			}
			c.n.Add(cost)
		}
	}
	if e.avail.Load() >= cost {
		if n := e.avail.Add(-cost); n >= 0 {
			return n
		}
		e.avail.Add(cost)
	}
	if s != nil {
		return s.steal(cost)
	}
	return -1
}

// fragmented reports whether e's spread allowance adds up to cost although
// no counter holds it alone: only the entry's mutex, which gathers it,
// can then pay the cost (see spendGathered).
func (e *entry) fragmented(cost int64) bool {
	return e.stripes.Load() != nil && e.held() >= cost
}

// held returns the allowance e holds unspent, its per-CPU counters
// included, as read one counter at a time.
func (e *entry) held() int64 {
	sum := max(e.avail.Load(), 0)
	if s := e.stripes.Load(); s != nil {
		for i := range s.cells {
			sum += max(s.cells[i].n.Load(), 0)
		}
	}
	return sum
}

// spendGathered spends cost from e's allowance gathered under its mutex,
// for a cost no single counter could pay; as spend, it returns what is
// left, or a negative number if the allowance could not pay.
func (l *Limiter) spendGathered(e *entry, cost int64) int64 {
	l.lockGather(e)
	defer l.scatterUnlock(e)
	return e.spend(cost)
}

// pay is spend for the slow path: a cost that e's counters hold only
// together is paid from them gathered.
func (l *Limiter) pay(e *entry, cost int64) int64 {
	if n := e.spend(cost); n >= 0 || !e.fragmented(cost) {
		return n
	}
	return l.spendGathered(e, cost)
}

// steal takes cost from any counter that holds it: the caller's ran dry
// while others may not have.
func (s *stripes) steal(cost int64) int64 {
	for i := range s.cells {
		c := &s.cells[i]
		if c.n.Load() < cost {
			continue
		}
		if n := c.n.Add(-cost); n >= 0 {
			return n
		}
		c.n.Add(cost)
	}
	return -1
}

// gather moves everything the counters hold back into avail, waiting out
// a decision that is putting back a cost it could not pay (a counter
// below zero for a moment). The caller holds e.mu.
func (e *entry) gather() {
	s := e.stripes.Load()
	if s == nil {
		return
	}
	for i := range s.cells {
		c := &s.cells[i]
		for {
			n := c.n.Load()
			if n < 0 {
				runtime.Gosched()
				continue
			}
			if n == 0 {
				break
			}
			if c.n.CompareAndSwap(n, 0) {
				e.avail.Deposit(n)
				break
			}
		}
	}
}

// scatter spreads avail over the counters, a share each, leaving a share
// and the remainder in avail for whichever CPU runs dry first. It does
// nothing while avail is below zero for a moment, or for an evicted entry.
// The caller holds e.mu, and gathered when it took it.
func (e *entry) scatter() {
	s := e.stripes.Load()
	if s == nil || e.isDead() {
		return
	}
	k := int64(len(s.cells))
	for {
		a := e.avail.Load()
		share := a / (k + 1)
		if share <= 0 {
			return
		}
		if e.avail.CompareAndSwap(a, a-share*k) {
			s.elsewhere.Store(a - share)
			for i := range s.cells {
				deposit(&s.cells[i].n, share)
			}
			return
		}
	}
}
