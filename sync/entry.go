package sync

import (
	"math"
	"math/bits"
	"runtime"
	stdsync "sync"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/sync/internal/account"
)

// entry is one key's state on this instance: for a split key, one part's
// (parts.go), each part an entry of its own with a bucket of its own.
//
// Its allowance is counted by its ledger (account.Ledger): the tokens
// handed to the counter avail in all, and avail itself, what is left of
// them, the only count on the request path.
type entry struct {
	// avail is the allowance left to spend locally. A request that finds
	// its cost there subtracts it, and puts it back if the result is
	// negative (another got there first). It is the only word
	// a decision with allowance writes, and it shares its cache line with
	// the words a decision reads (the key, the limit, the last sync's
	// figures): a decision that writes the line needs it whole anyway, and
	// a key hot enough for cores to fight over the line spends from its
	// stripes instead, leaving this line shared in every core's cache.
	// Entries are a multiple of 64 bytes long, so the allocator aligns them
	// to a cache line.
	avail counter

	key        string
	limit      atomic.Pointer[hybridlimit.Limit] // replaced when a decision brings another limit for the key
	remaining  atomic.Int64                      // the key's global tokens left as of the last sync: left, or the sum over a split key's parts
	resetAfter atomic.Int64                      // nanoseconds until the global bucket is full, as of the last sync
	stripes    atomic.Pointer[stripes]           // a hot key's allowance spread over one counter per CPU, or nil
	marks      atomic.Uint32                     // dead and synced (see isDead, isSynced): one word, so that rideBelow fits on this line
	rideBelow  atomic.Int32                      // a decision that leaves less allowance than this puts the entry on the riders (spent); 0: none does
	// The first cache line ends here: all a decision reads or writes.

	owner     string        // the caller's key; key is the table's name for it
	place                   // where this entry's bucket sits in its key's layout: parts.go's alone
	deniedFor atomic.Uint32 // limitHash of the key's limit denyUntil was set under
	left      atomic.Int64  // tokens left in this entry's global bucket as of the last sync
	heardAt   atomic.Int64  // when Redis last answered for this entry, or when it was made; read with denyUntil
	denyUntil atomic.Int64  // nanoseconds of the limiter's clock before which Redis said the bucket is empty; 0 if not

	mu       stdsync.Mutex  // guards the fields below; never held across I/O
	ledger   account.Ledger // the accounting of avail and of the messages to Redis
	group    int32          // the slot group of the entry's keys in Redis; set at creation
	flagged  bool           // on the limiter's list of entries wanting an early sync
	riding   bool           // on the limiter's riders (spent)
	owes     bool           // owes Redis tokens, in the limiter's owing
	dueSlot  int8           // the schedule's slot it waits in, while due links it there; guarded by the schedule's lock
	fellOver atomic.Int64   // home of a split key: when a decision last turned to another part, ns of the limiter's clock (parts.go)
	due      dueLink        // its neighbours in the schedule's list of its slot, or none; guarded by the schedule's lock
	epoch    int64          // first sequence number of this entry's messages
}

// inDebt reports whether e's bucket, by Redis's last word on it, holds
// less than nothing at now (ns of the limiter's clock): a charge took more
// than it held, so it is full later than a refill of its whole burst from
// now. It compares without dividing (ahead Rate > Burst Period), cheap
// enough for the deny path, which reads denyUntil beside heardAt anyway.
func (e *entry) inDebt(now int64) bool {
	ahead := e.heardAt.Load() + e.resetAfter.Load() - now
	if ahead <= 0 || !e.isSynced() {
		return false
	}
	part := partLimit(e)
	ah, al := bits.Mul64(uint64(ahead), uint64(part.Rate))
	bh, bl := bits.Mul64(uint64(part.Burst), uint64(part.Period))
	return ah > bh || ah == bh && al > bl
}

// debt returns how many tokens e's bucket is short of empty at now, by
// Redis's last word on it and the refill since, rounded up; 0 if it is not
// in debt.
func (e *entry) debt(now int64) int64 {
	if !e.inDebt(now) {
		return 0
	}
	part := partLimit(e)
	ahead := float64(e.heardAt.Load() + e.resetAfter.Load() - now)
	return int64(math.Ceil(ahead*float64(part.Rate)/float64(part.Period))) - part.Burst // a token part repaid is still owed
}

// denialHolds reports whether the denial e remembers (denyUntil) holds
// for the key under limit: the limit it was set under, or one no looser
// than e's limit, for which it holds already. A looser limit (more burst,
// a faster rate) may find tokens in the same bucket. A key asked under
// two limits in turn thus keeps a denial set under the looser one instead
// of asking Redis at every turn. (A hash: a collision keeps a denial that
// should go, until its time, never admits what it should not.)
func (e *entry) denialHolds(limit hybridlimit.Limit) bool {
	cur := *e.limit.Load()
	return limit == cur || e.deniedFor.Load() == limitHash(limit) || noLooser(limit, cur)
}

// limitHash is a 32-bit hash of a limit.
func limitHash(l hybridlimit.Limit) uint32 {
	h := uint64(l.Rate)*0x9e3779b97f4a7c15 ^ uint64(l.Period)*0xc2b2ae3d27d4eb4f ^ uint64(l.Burst)*0x165667b19e3779f9
	return uint32(h ^ h>>32)
}

// noLooser reports whether a admits no more than b: no more burst and a
// rate no faster (a.Rate/a.Period <= b.Rate/b.Period, in 128 bits).
func noLooser(a, b hybridlimit.Limit) bool {
	if a.Burst > b.Burst {
		return false
	}
	ah, al := bits.Mul64(uint64(a.Rate), uint64(b.Period))
	bh, bl := bits.Mul64(uint64(b.Rate), uint64(a.Period))
	return ah < bh || ah == bh && al <= bl
}

// evicted is stored in avail of an evicted entry: far enough below zero that
// no request's subtraction brings it back, so every request on a stale
// pointer falls to the slow path and looks the key up again.
const evicted = -1 << 62

// consumed returns the tokens admitted in all. The caller holds e.mu.
func (e *entry) consumed() int64 { return e.ledger.Consumed(&e.avail) }

// counter is a count decisions spend from without a lock: a decision
// subtracts its cost and puts it back if the result is negative. It is
// the account.Counter of an entry's ledger.
type counter struct{ atomic.Int64 }

// Deposit adds n once no decision is putting back a cost it could not
// pay (see deposit).
func (c *counter) Deposit(n int64) { deposit(&c.Int64, n) }

// deposit adds n to a counter decisions spend from, once none is putting
// back a cost it could not pay: added during such a moment, n would hide
// the dip below zero by which a reader knows to wait for the cost to come
// back, and the reader would count it as spent. An evicted entry's avail,
// far below zero for good, takes n at once.
func deposit(c *atomic.Int64, n int64) {
	for {
		a := c.Load()
		if a < 0 && a >= evicted/2 {
			runtime.Gosched()
			continue
		}
		if c.CompareAndSwap(a, a+n) {
			return
		}
	}
}

// Take removes up to n of what is left and returns how much it took.
func (c *counter) Take(n int64) int64 {
	for {
		a := c.Load()
		t := min(n, max(a, 0))
		if t == 0 || c.CompareAndSwap(a, a-t) {
			return t
		}
	}
}

// Held returns what is left, waiting out a decision putting back a cost;
// 0 for an evicted entry.
func (c *counter) Held() int64 {
	for {
		a := c.Load()
		if a >= 0 || a < evicted/2 {
			return max(a, 0)
		}
		runtime.Gosched()
	}
}

// Swap sets the counter to to(what it holds), computed from the same
// reading that the swap replaces, so no decision slips between the
// reading and the new value. A negative reading means a decision is about
// to put back a cost it could not pay; Swap waits for it rather than fold
// a transient into the books. An evicted entry's counter is left alone.
func (c *counter) Swap(to func(from int64) int64) (from, set int64, ok bool) {
	for {
		a := c.Load()
		if a < 0 {
			if a < evicted/2 {
				return 0, 0, false
			}
			runtime.Gosched()
			continue
		}
		t := to(a)
		if c.CompareAndSwap(a, t) {
			return a, t, true
		}
	}
}

// The marks an entry's life sets, each once and for good.
const (
	markDead   = 1 << iota // evicted or replaced; look the key up again
	markSynced             // Redis has answered for this entry at least once
)

func (e *entry) isDead() bool   { return e.marks.Load()&markDead != 0 }
func (e *entry) isSynced() bool { return e.marks.Load()&markSynced != 0 }

// evict marks the entry dead if it holds no allowance. The caller holds e.mu.
func (e *entry) evict() bool {
	if !e.avail.CompareAndSwap(0, evicted) {
		return false
	}
	e.marks.Or(markDead)
	return true
}
