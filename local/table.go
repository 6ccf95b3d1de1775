package local

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// Table is a set of token buckets, one per string key, for many keys at
// once. Each bucket runs the math of Core (GCRA on a token clock, integer
// tokens, exactly Burst admitted at one instant) and is stored as one atomic
// 64-bit word in a 64-byte entry with its key (inline up to 31 bytes) and a
// pointer to its limit's constants: about 100 bytes a key in all, hash
// table included.
//
// The limit is passed on every call, so one Table serves many policies. A key
// keeps the limit it was last used with; a call with a different limit
// converts its bucket as Core.SetLimit does: it keeps the tokens the bucket
// holds, cut to the new burst, and refills at the new rate from then on.
//
// A key that is absent is a full bucket: its first call finds Burst tokens.
// So a bucket that has refilled completely is as good as absent, and
// forgetting it loses nothing. The Table forgets such buckets itself, with
// no goroutine of its own: every insert examines two entries of its shard
// and drops those that have been full for at least a minute, and Sweep
// drops them all. Memory is also bounded (WithMaxKeys): a key arriving in a
// full shard evicts a bucket of that shard found in a sample, eight entries
// on from where the last reclaim looked: the first that has been full for a
// minute if the sample holds one (an idle bucket elsewhere in the shard may
// be missed), and otherwise the one short of the fewest tokens, which lets
// that key spend again what it had not yet earned back; size the bound so
// that this is rare.
//
// Keys are spread over shards (256 by default) by a hash seeded per Table,
// and each shard is an open-addressing hash table. A decision on a key
// already present takes no lock and writes nothing shared but the key's own
// word: it finds the key with atomic loads and runs one compare-and-swap
// loop. Inserting, converting, evicting and resizing take the shard's mutex;
// an entry is retired by swapping its word for a marker, so a decision racing
// with its conversion or its reclaim as idle fails its compare-and-swap and
// starts again on the key's new entry: neither ever loses a spend. (Delete,
// and eviction for room, forget a bucket on purpose, spends and all.)
// Times are measured from the instant the Table was
// made, on the monotonic clock, and any time.Time may be passed, as for
// Bucket: each shard keeps its own present, and an explicit time is clamped
// into the window around it that the key's limit allows. A bucket is
// reclaimed as idle by the caller's time, or by the present if that is
// earlier, so no caller, however far ahead its time, makes the Table forget
// a bucket that is still short at its clock.
//
// The zero Table is unusable: its methods return an error; use NewTable.
// Table is safe for concurrent use by multiple goroutines.
type Table struct {
	seed     maphash.Seed
	base     time.Time
	mask     uint64 // shards - 1
	perShard int    // the most entries a shard holds
	shards   []shard
	tomb     *entry // marks a slot whose entry was removed

	// interned shares one params per distinct limit among the entries
	// using it; it holds at most maxInterned limits, and a limit beyond
	// that gets params of its own.
	internMu sync.RWMutex
	interned map[hybridlimit.Limit]*params
}

// shard is one independently locked part of a Table: an open-addressing hash
// table with linear probing, read without a lock and written under mu.
type shard struct {
	index atomic.Pointer[slots] // replaced whole when resized
	mu    sync.Mutex            // guards writes to index, and the fields below
	live  int                   // entries in index
	used  int                   // entries and tombstones in index
	hand  int                   // slot the next reclaim or eviction looks at
	now   present               // written at most once a millisecond
	// Padding to 64 bytes, one cache line a shard, so that writers of one
	// shard never slow down readers of its neighbours (false sharing).
	_ [64 - 48]byte
}

// slots is one generation of a shard's hash table. A slot's entry, once
// set, only changes to another entry for the same key (a new limit) or to
// the tombstone, and a tombstone to a new entry; a slot's hash is always
// stored before the entry it belongs to, so a reader that loads the entry
// and then the hash never pairs an entry with an older hash.
type slots struct {
	mask uint64 // len(s) - 1, a power of two minus one
	s    []slot
}

type slot struct {
	hash atomic.Uint64
	e    atomic.Pointer[entry]
}

// entry is one key's bucket. Only tat changes; a new limit means a new
// entry. It is 64 bytes, one cache line, and holds a key of up to 31 bytes
// itself, so that finding a key and deciding on it read one line besides
// the slot.
type entry struct {
	tat   atomic.Uint64 // Core.tat, or retired once removed
	p     *params
	long  string   // the key, when longer than short
	short [31]byte // the key, when it fits
	n     uint8    // len(key), when it fits
}

func newEntry(p *params, key string) *entry {
	e := &entry{p: p}
	if len(key) <= len(e.short) {
		e.n = uint8(copy(e.short[:], key))
	} else {
		e.long = strings.Clone(key) // don't pin a caller's larger buffer
	}
	return e
}

// is reports whether e is key's entry.
func (e *entry) is(key string) bool {
	if len(key) <= len(e.short) {
		return int(e.n) == len(key) && string(e.short[:e.n]) == key
	}
	return e.long == key
}

const (
	// retired is the word of an entry removed from its shard. A bucket
	// whose state would be this value stores retired+1 instead, a
	// difference of one unit, at most a nanosecond of refill.
	retired = math.MaxUint64
	// maxInterned bounds Table.interned.
	maxInterned = 4096
	// reclaimPerInsert is how many entries an insert examines for reclaim.
	reclaimPerInsert = 2
	// evictSample is how many entries a capacity eviction compares.
	evictSample = 8
	// idleAfter is how long a bucket must have been full to be reclaimed.
	// It keeps a key used every few seconds from being dropped and added
	// again on every call, and a caller whose time lags another's by up to
	// this much still finds the state it would have found had the bucket
	// been kept.
	idleAfter = int64(time.Minute)
)

// live returns tat, moved off the retired marker.
func live(tat uint64) uint64 {
	if tat == retired {
		return 0 // retired+1, modulo 2^64
	}
	return tat
}

// ErrZeroTable is returned by the methods of a Table not made by NewTable.
var ErrZeroTable = errors.New("local: Table not made by NewTable")

// NewTable returns an empty Table. It returns an error for an invalid
// option. NewTable starts no goroutine.
func NewTable(opts ...Option) (*Table, error) {
	o, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	t := &Table{
		seed:     maphash.MakeSeed(),
		base:     time.Now(),
		mask:     uint64(o.shards - 1),
		perShard: o.maxKeys / o.shards,
		shards:   make([]shard, o.shards),
		tomb:     &entry{},
		interned: make(map[hybridlimit.Limit]*params),
	}
	for i := range t.shards {
		t.shards[i].index.Store(newSlots(8))
		t.shards[i].now.ns.Store(epoch)
	}
	return t, nil
}

func newSlots(n int) *slots { return &slots{mask: uint64(n - 1), s: make([]slot, n)} }

// slotsFor returns the size of a table for n entries: the least power of two
// at least n, and at least 8.
func slotsFor(n int) int {
	if n <= 8 {
		return 8
	}
	return 1 << bits.Len(uint(n-1))
}

// Allow is AllowN(key, time.Now(), limit, 1), with the clock read inside the
// compare-and-swap loop (or under the shard's mutex) rather than before it.
func (t *Table) Allow(key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	return t.take(key, 0, true, limit, 1)
}

// AllowN takes n tokens from key's bucket at now if it holds them, and
// reports the decision (see Bucket.TakeN). It returns an error, and decides
// nothing, for a key hybridlimit.CheckKey rejects (wrapping
// hybridlimit.ErrInvalidKey), a limit Validate rejects (wrapping
// hybridlimit.ErrInvalidLimit), or a cost CheckCost rejects (wrapping
// hybridlimit.ErrInvalidCost or hybridlimit.ErrCostExceedsBurst), checked in
// that order.
func (t *Table) AllowN(key string, now time.Time, limit hybridlimit.Limit, n int64) (hybridlimit.Result, error) {
	// The fast path of take without the clock, by hand: on a Table of a
	// million keys a decision waits on memory, and the fewer instructions
	// between one decision's reads and the next's, the more they overlap.
	x := t.at(now)
	if len(t.shards) == 0 || uint(len(key))-1 >= hybridlimit.MaxKeyLen {
		return hybridlimit.Result{Limit: limit}, t.badKey(key)
	}
	h := maphash.String(t.seed, key)
	s := &t.shards[h&t.mask]
	e := t.find(s, h, key)
	if e == nil || e.p.limit != limit || n < 1 || n > limit.Burst {
		return t.take(key, x, false, limit, n)
	}
	p := e.p
	for {
		old := e.tat.Load()
		y := p.within(x, s.now.at(x, t.base)) // t.within, by hand
		v := p.clock(y)
		tat, ok := p.take(old, v, n)
		switch {
		case old == retired:
			return t.takeLocked(s, h, key, x, false, limit, n)
		case !ok:
			return p.result(old, y, v, n, false), nil
		case e.tat.CompareAndSwap(old, live(tat)):
			d := tat - v // p.taken, by hand: it does not inline
			r := hybridlimit.Result{Limit: limit, Allowed: true, Remaining: int64((p.tol - d) / p.one), ResetAfter: time.Duration(d)}
			if p.perNs != 1 {
				r.ResetAfter = p.waitLong(y, d)
			}
			return r, nil
		}
	}
}

// at returns now on the Table's axis, not clamped: see within.
func (t *Table) at(now time.Time) int64 { return sub(now, t.base) }

// clock returns the current time on the Table's axis, and makes it the
// present of s if it is later.
func (t *Table) clock(s *shard) int64 {
	x := since(t.base)
	s.now.observe(x)
	return x
}

// within returns x, an explicit time on the Table's axis, clamped for p
// into the window around the present of s. Call it after loading the state
// x will be compared with (see present).
func (t *Table) within(s *shard, p *params, x int64) int64 {
	return p.within(x, s.now.at(x, t.base))
}

// check validates the key every keyed method gets and returns its hash and
// shard.
func (t *Table) check(key string) (uint64, *shard, error) {
	if len(t.shards) == 0 || uint(len(key))-1 >= hybridlimit.MaxKeyLen { // CheckKey, inline
		return 0, nil, t.badKey(key)
	}
	h := maphash.String(t.seed, key)
	return h, &t.shards[h&t.mask], nil
}

// badKey returns the error for a key check rejects, or for the zero Table,
// kept out of the decision paths.
func (t *Table) badKey(key string) error {
	if len(t.shards) == 0 {
		return ErrZeroTable
	}
	return fmt.Errorf("local: %w", hybridlimit.CheckKey(key))
}

// find returns key's entry in s, or nil, without a lock. An entry found may
// be retired a moment later; callers see that in its word.
func (t *Table) find(s *shard, h uint64, key string) *entry {
	ix := s.index.Load()
	for i := (h >> 16) & ix.mask; ; i = (i + 1) & ix.mask {
		sl := &ix.s[i]
		e := sl.e.Load()
		if e == nil {
			return nil
		}
		if sl.hash.Load() == h && e.is(key) { // the tombstone is no key's
			return e
		}
	}
}

// take runs AllowN at time x, or at the clock when clock is set.
func (t *Table) take(key string, x int64, clock bool, limit hybridlimit.Limit, n int64) (hybridlimit.Result, error) {
	// t.check, by hand: it does not inline.
	if len(t.shards) == 0 || uint(len(key))-1 >= hybridlimit.MaxKeyLen {
		return hybridlimit.Result{Limit: limit}, t.badKey(key)
	}
	h := maphash.String(t.seed, key)
	s := &t.shards[h&t.mask]
	if e := t.find(s, h, key); e != nil && e.p.limit == limit { // so limit is valid
		p := e.p
		if n < 1 || n > limit.Burst {
			return hybridlimit.Result{Limit: limit}, p.checkCost(n)
		}
		for {
			old := e.tat.Load()
			if old == retired {
				break // removed meanwhile: look again under the lock
			}
			var y int64
			if clock {
				y = t.clock(s)
			} else {
				y = t.within(s, p, x)
			}
			v := p.clock(y)
			tat, ok := p.take(old, v, n)
			if !ok {
				return p.result(old, y, v, n, false), nil
			}
			if e.tat.CompareAndSwap(old, live(tat)) {
				// p.taken, by hand: it does not inline, and every
				// instruction here delays the next decision's reads.
				d := tat - v
				r := hybridlimit.Result{Limit: limit, Allowed: true, Remaining: int64((p.tol - d) / p.one), ResetAfter: time.Duration(d)}
				if p.perNs != 1 {
					r.ResetAfter = p.waitLong(y, d)
				}
				return r, nil
			}
		}
	}
	return t.takeLocked(s, h, key, x, clock, limit, n)
}

// takeLocked is take for a new key, a key whose limit changed, or one
// removed meanwhile: it validates the limit and decides under the lock.
func (t *Table) takeLocked(s *shard, h uint64, key string, x int64, clock bool, limit hybridlimit.Limit, n int64) (hybridlimit.Result, error) {
	p, err := t.params(limit)
	if err != nil {
		return hybridlimit.Result{Limit: limit}, err
	}
	if err := p.checkCost(n); err != nil {
		return hybridlimit.Result{Limit: limit}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if clock {
		x = t.clock(s)
	}
	e := t.get(s, h, key, x, p)
	for { // decisions on the entry still run concurrently without the lock
		old := e.tat.Load()
		y := t.within(s, p, x) // a no-op on a clock reading
		v := p.clock(y)
		tat, ok := p.take(old, v, n)
		if !ok {
			return p.result(old, y, v, n, false), nil
		}
		if e.tat.CompareAndSwap(old, live(tat)) {
			return p.taken(tat, y, v), nil
		}
		if clock {
			x = t.clock(s)
		}
	}
}

// Peek reports what AllowN would decide, without spending anything and
// without adding the key (see Core.Peek). It returns the same errors as
// AllowN.
func (t *Table) Peek(key string, now time.Time, limit hybridlimit.Limit, n int64) (hybridlimit.Result, error) {
	h, s, err := t.check(key)
	if err != nil {
		return hybridlimit.Result{Limit: limit}, err
	}
	x := t.at(now)
	var (
		from *params
		tat  uint64
	)
	if e := t.find(s, h, key); e != nil {
		if tat = e.tat.Load(); tat != retired { // a retired bucket was full
			from = e.p
		}
	}
	p := from
	if from == nil || from.limit != limit {
		if p, err = t.params(limit); err != nil {
			return hybridlimit.Result{Limit: limit}, err
		}
	}
	cur := s.now.at(x, t.base) // after loading tat (see present)
	if x = p.within(x, cur); from != nil && from != p {
		x = from.within(x, cur)
	}
	if from == nil {
		tat = p.full(x)
	} else if from.limit != limit {
		tat = convert(from, p, tat, max(x, cur)) // at the present: see Table.convert
	}
	if err := p.checkCost(n); err != nil {
		return hybridlimit.Result{Limit: limit}, err
	}
	v := p.clock(x)
	_, ok := p.take(tat, v, n)
	return p.result(tat, x, v, n, ok), nil
}

// Add gives n tokens back to key's bucket at now (see Core.Add). An absent
// key is already full, so Add leaves it absent; a count below 1 adds
// nothing. It returns an error for a key or limit AllowN would reject.
func (t *Table) Add(key string, now time.Time, limit hybridlimit.Limit, n int64) error {
	h, s, err := t.check(key)
	if err != nil {
		return err
	}
	x := t.at(now)
	e := t.find(s, h, key)
	if e != nil && e.p.limit == limit {
		if n >= 1 && !t.add(s, e, x, n) {
			return t.addLocked(s, h, key, x, e.p, n)
		}
		return nil
	}
	p, err := t.params(limit)
	if err != nil || e == nil || n < 1 {
		return err
	}
	return t.addLocked(s, h, key, x, p, n)
}

// add gives n tokens back to e, in s, at x, and reports false if e was
// retired.
func (t *Table) add(s *shard, e *entry, x, n int64) bool {
	for {
		old := e.tat.Load()
		if old == retired {
			return false
		}
		tat := e.p.add(old, e.p.clock(t.within(s, e.p, x)), n)
		if tat == old || e.tat.CompareAndSwap(old, live(tat)) {
			return true
		}
	}
}

// addLocked is Add for a key whose entry runs under another limit or was
// retired: under the lock, it converts the entry, if there still is one.
func (t *Table) addLocked(s *shard, h uint64, key string, x int64, p *params, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := t.lookup(s, h, key); ok {
		t.add(s, t.convert(s, i, x, p), x, n)
	}
	return nil
}

// Charge spends n tokens of key's bucket at now whatever it holds (see
// Core.Charge), adding the key if it is absent: a key in debt is kept until
// refill repays it, and is the last a full Table evicts. It returns an
// error, changing nothing, for a key or limit AllowN would reject and for
// an n Core.Charge would.
func (t *Table) Charge(key string, now time.Time, limit hybridlimit.Limit, n int64) (hybridlimit.Result, error) {
	h, s, err := t.check(key)
	if err != nil {
		return hybridlimit.Result{Limit: limit}, err
	}
	p, err := t.params(limit)
	if err == nil {
		err = p.checkCharge(n)
	}
	if err != nil {
		return hybridlimit.Result{Limit: limit}, err
	}
	x := t.at(now)
	if e := t.find(s, h, key); e != nil && e.p.limit == limit {
		if r, ok, err := t.charge(s, e, x, n); ok {
			return r, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _, err := t.charge(s, t.get(s, h, key, x, p), x, n)
	return r, err
}

// charge charges n to e, in s, at x, and reports false if e was retired.
func (t *Table) charge(s *shard, e *entry, x, n int64) (hybridlimit.Result, bool, error) {
	for {
		old := e.tat.Load()
		if old == retired {
			return hybridlimit.Result{}, false, nil
		}
		y := t.within(s, e.p, x)
		v := e.p.clock(y)
		tat, err := e.p.charge(old, v, n)
		if err != nil {
			return hybridlimit.Result{Limit: e.p.limit}, true, err
		}
		if tat == old || e.tat.CompareAndSwap(old, live(tat)) {
			return e.p.charged(tat, y, v), true, nil
		}
	}
}

// Set makes key's bucket hold tokens at now, clamped to [0, Burst] (see
// Core.Set), adding the key unless that leaves it full. It returns an error
// for a key or limit AllowN would reject.
func (t *Table) Set(key string, now time.Time, limit hybridlimit.Limit, tokens int64) error {
	h, s, err := t.check(key)
	if err != nil {
		return err
	}
	p, err := t.params(limit)
	if err != nil {
		return err
	}
	x := t.at(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := t.lookup(s, h, key); !ok && tokens >= limit.Burst {
		return nil
	}
	// Set is absolute, so a plain store wins over racing decisions; the
	// entry cannot be retired meanwhile, as that takes the lock.
	e := t.get(s, h, key, x, p)
	e.tat.Store(live(p.set(p.clock(t.within(s, p, x)), tokens)))
	return nil
}

// Delete forgets key's bucket, as if it were full, and reports whether the
// key was there: the Reset of the other limiters of this module.
func (t *Table) Delete(key string) bool {
	h, s, err := t.check(key)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := t.lookup(s, h, key)
	if ok {
		t.remove(s, i)
	}
	return ok
}

// Sweep forgets every bucket that has been full for at least a minute at
// now, and returns how many it forgot. A now later than the present (at
// most a minute past the Table's clock) counts as the present, and one
// before the window of a key's limit as the window's start (see Table). It also gives back the memory of
// shards that have shrunk to an eighth of their size. It takes each shard's
// mutex in turn, for one pass over that shard; decisions on keys already
// present go on meanwhile. Owners with millions of keys call it every few
// minutes, or never and rely on the reclaim done by inserts.
func (t *Table) Sweep(now time.Time) int {
	x := t.at(now)
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += t.sweep(s, x)
		s.mu.Unlock()
	}
	return n
}

// Len returns the number of keys the Table tracks.
func (t *Table) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += s.live
		s.mu.Unlock()
	}
	return n
}

// params returns the shared params of limit, validating it.
func (t *Table) params(limit hybridlimit.Limit) (*params, error) {
	t.internMu.RLock()
	p, ok := t.interned[limit]
	t.internMu.RUnlock()
	if ok {
		return p, nil
	}
	v, err := newParams(limit)
	if err != nil {
		return nil, err
	}
	t.internMu.Lock()
	defer t.internMu.Unlock()
	if p, ok := t.interned[limit]; ok {
		return p, nil
	}
	p = &v
	if len(t.interned) < maxInterned {
		t.interned[limit] = p
	}
	return p, nil
}

// The methods below run with s.mu held.

// lookup returns the slot of key's entry in s.
func (t *Table) lookup(s *shard, h uint64, key string) (uint64, bool) {
	ix := s.index.Load()
	for i := (h >> 16) & ix.mask; ; i = (i + 1) & ix.mask {
		sl := &ix.s[i]
		e := sl.e.Load()
		switch {
		case e == nil:
			return 0, false
		case sl.hash.Load() == h && e.is(key):
			return i, true
		}
	}
}

// get returns key's entry, converted to p, inserting a full bucket if the key
// is absent.
func (t *Table) get(s *shard, h uint64, key string, x int64, p *params) *entry {
	if i, ok := t.lookup(s, h, key); ok {
		return t.convert(s, i, x, p)
	}
	t.reclaim(s, x, reclaimPerInsert)
	if s.live >= t.perShard {
		t.evict(s, x)
	}
	if ix := s.index.Load(); 4*(s.used+1) > 3*len(ix.s) {
		t.resize(s, 2*(s.live+1))
	}
	e := newEntry(p, key)
	e.tat.Store(live(p.full(t.within(s, p, x))))
	ix := s.index.Load()
	for i := (h >> 16) & ix.mask; ; i = (i + 1) & ix.mask {
		sl := &ix.s[i]
		if old := sl.e.Load(); old == nil || old == t.tomb {
			if old == nil {
				s.used++
			}
			sl.hash.Store(h)
			sl.e.Store(e) // publish last
			s.live++
			return e
		}
	}
}

// convert returns the entry in slot i, replaced by one running under p if
// it ran under another limit. The new entry keeps the tokens the bucket
// holds (see Core.SetLimit) at the shard's present, or at x if that is
// later, and the present moves there: converted at an earlier time, the
// bucket would refill at the new rate over time it was already spent under
// the old one, and keys switching limits back and forth at two times could
// gain that refill on every switch. A decision at x earlier than the
// conversion sees the bucket as of x after it, with fewer tokens.
func (t *Table) convert(s *shard, i uint64, x int64, p *params) *entry {
	sl := &s.index.Load().s[i]
	e := sl.e.Load()
	if e.p.limit == p.limit {
		return e
	}
	ne := &entry{p: p, long: e.long, short: e.short, n: e.n}
	for {
		old := e.tat.Load()
		now := s.now.at(x, t.base)             // after loading old (see present)
		y := e.p.within(p.within(x, now), now) // in both windows
		if y > now {
			s.now.raise(min(y, since(t.base)+presentLead))
		}
		ne.tat.Store(live(convert(e.p, p, old, max(y, now))))
		if e.tat.CompareAndSwap(old, retired) {
			break
		}
	}
	sl.e.Store(ne)
	return ne
}

// remove retires the entry in slot i.
func (t *Table) remove(s *shard, i uint64) {
	sl := &s.index.Load().s[i]
	sl.e.Load().tat.Store(retired)
	sl.e.Store(t.tomb)
	s.live--
}

// removeIdle retires the entry in slot i if it has been full since at
// least idleAfter before x, and reports whether it did. A time x past the
// present counts as the present, so that no caller, however far ahead its
// time, makes the Table forget a bucket that is still short now; a time
// before the window as the window's start, which forgets less, not more.
func (t *Table) removeIdle(s *shard, i uint64, x int64) bool {
	sl := &s.index.Load().s[i]
	e := sl.e.Load()
	old := e.tat.Load()
	now := s.now.at(x, t.base) // after loading old (see present)
	x = min(e.p.within(x, now), now) - idleAfter
	if debt(old, e.p.clock(x)) > 0 || !e.tat.CompareAndSwap(old, retired) {
		return false // in use, or spent from just now
	}
	sl.e.Store(t.tomb)
	s.live--
	return true
}

// next returns the slot of the next entry from the hand on, moving the hand
// past it, or false if none is found within limit slots.
func (s *shard) next(tomb *entry, limit int) (uint64, bool) {
	ix := s.index.Load()
	for range min(limit, len(ix.s)) {
		i := uint64(s.hand) & ix.mask
		s.hand = int(i) + 1
		if e := ix.s[i].e.Load(); e != nil && e != tomb {
			return i, true
		}
	}
	return 0, false
}

// reclaim examines up to k entries from the hand on and retires the idle
// ones.
func (t *Table) reclaim(s *shard, x int64, k int) {
	for range k {
		i, ok := s.next(t.tomb, 4*k)
		if !ok {
			return
		}
		t.removeIdle(s, i, x)
	}
}

// evict retires one entry to make room: the first idle one among
// evictSample from the hand on, or else the one short of the fewest
// tokens, debt included, whose loss admits the fewest tokens early. Tokens,
// not shares of each burst, so that among keys of different limits a key 1
// token short goes before one 100 tokens short of a burst of 1000.
func (t *Table) evict(s *shard, x int64) {
	best, bestShort := uint64(0), int64(math.MaxInt64)
	// Buckets are weighed no later than the clock: at a time ahead every
	// bucket reads full, and the first sampled, however drained, would be
	// forgiven (as removeIdle never forgets one short now).
	clock := since(t.base)
	for range evictSample {
		i, ok := s.next(t.tomb, len(s.index.Load().s))
		if !ok {
			break
		}
		if t.removeIdle(s, i, x) {
			return
		}
		e := s.index.Load().s[i].e.Load()
		tat := e.tat.Load()
		short := e.p.short(tat, e.p.clock(min(t.within(s, e.p, x), clock)))
		if short < bestShort {
			best, bestShort = i, short
		}
	}
	if bestShort < math.MaxInt64 {
		t.remove(s, best)
	}
}

// resize moves the live entries of s to a new table of at least n slots,
// dropping the tombstones. Readers still probing the old table find the
// same entries there, or miss a key inserted since and look again under
// the lock.
func (t *Table) resize(s *shard, n int) {
	old := s.index.Load()
	ix := newSlots(slotsFor(n))
	for i := range old.s {
		e := old.s[i].e.Load()
		if e == nil || e == t.tomb {
			continue
		}
		h := old.s[i].hash.Load()
		for j := (h >> 16) & ix.mask; ; j = (j + 1) & ix.mask {
			if ix.s[j].e.Load() == nil {
				ix.s[j].hash.Store(h)
				ix.s[j].e.Store(e)
				break
			}
		}
	}
	s.index.Store(ix)
	s.used = s.live
	s.hand = 0
}

// sweep retires every idle entry and returns how many it retired.
func (t *Table) sweep(s *shard, x int64) int {
	n := 0
	ix := s.index.Load()
	for i := range ix.s {
		if e := ix.s[i].e.Load(); e != nil && e != t.tomb && t.removeIdle(s, uint64(i), x) {
			n++
		}
	}
	if len(ix.s) > 8 && 8*s.live < len(ix.s) || s.used > 2*s.live+8 {
		t.resize(s, 2*s.live) // give memory back, and drop the tombstones
	}
	return n
}
