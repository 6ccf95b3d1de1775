package sync

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/sharding"
)

// A split key is a key whose limit is divided over parts, each a bucket of
// its own under a name of its own (WithSplitKeys, WithAutoSplit). This
// file maps a key to its parts: the layout, each part's names, slot group
// and limit, the home part an instance spends first, where a decision
// turns when home is empty, the sum the decisions report, and the parts a
// charge, a refund and a reset visit. reshard.go moves a key between
// layouts and heat.go finds the keys to move. The rest of the limiter sees
// one bucket per entry (an entry per part) and calls on these three files
// only where a key's parts meet: entry (a key's home part), fallOver (a
// decision home cannot pay), chargeParts, layoutEntries and knownParts
// (the parts a charge, a refund and a reset visit), turnedTo, outOfTouch
// and heardLeft (a part's message and reply), relocate (a round's moved
// replies) and heat.add.

// layout is how a key is split: into shards parts, of generation gen.
// Generation 0 is the configured layout (WithSplitKeys, else whole); each
// reshard makes the next generation, under fresh key names, and leaves in
// the buckets of the layout it replaces a marker naming the new one, which
// is how every instance learns of it at its next message.
type layout struct{ shards, gen int }

func (at layout) marker() string { return "m" + strconv.Itoa(at.shards) + "." + strconv.Itoa(at.gen) }

// place is where an entry's bucket sits in its key's layout. Only this
// file and reshard.go read its fields; the rest asks its methods.
type place struct {
	shard  int16        // which part of a split key this entry spends (0 if whole)
	shards int16        // how many parts the key is split into (1 if whole; at most sharding.MaxShards)
	gen    int32        // the layout's generation: 0 for the configured one, more after a reshard
	via    atomic.Int32 // home of a split key: the part decisions turned to last (home's own index at first)
}

// placeAt makes p part j of layout at, its home's turn at itself.
func (p *place) placeAt(j int, at layout) {
	p.shard, p.shards, p.gen = int16(j), int16(at.shards), int32(at.gen)
	p.via.Store(int32(j))
}

// whole reports whether the key is one bucket, not split.
func (p *place) whole() bool { return p.shards == 1 }

// resharded reports whether the layout is one a reshard made, whose
// markers lapse unless its instances renew them (keepMarkers).
func (p *place) resharded() bool { return p.gen > 0 }

// layout returns the layout of the key that the place is in.
func (p *place) layout() layout { return layout{int(p.shards), int(p.gen)} }

// partOf returns the limit the place's part enforces under the key's limit.
func (p *place) partOf(limit hybridlimit.Limit) hybridlimit.Limit {
	return partOf(limit, int(p.shard), int(p.shards))
}

// supersedes reports whether the configured layout at replaces e's: the
// key's shard count changed with its limit or the configuration. A layout
// a reshard made stays whatever the configuration says: the key's layout
// is what Redis says.
func (at layout) supersedes(e *entry) bool { return e.gen == 0 && int(e.shards) != at.shards }

// partOf is the limit of part j of s.
func partOf(limit hybridlimit.Limit, j, s int) hybridlimit.Limit {
	if s == 1 {
		return limit
	}
	return sharding.Part(limit, j, s)
}

// partKeys names the Redis keys of part j of key in layout at: its global
// bucket, a hash that also holds every instance's ledger (field "lb:" and
// the instance id), and its Optimistic allowances. Part j lives in the
// slot group sharding.Group assigns it, and a split key's names carry
// "#j.s" after the kind (and ".gen" after the first generation), so whole
// keys and the parts of every layout never share a name.
func (l *Limiter) partKeys(key string, j int, at layout) (bucket, allowances string) {
	b, ends := l.appendPartKeys(nil, key, j, at, l.partGroup(key, j, at.shards))
	names := string(b)
	return names[:ends[0]], names[ends[0]:ends[1]]
}

// appendPartKeys appends to dst the names partKeys returns, for the part
// whose slot group is g, end to end, and returns where each ends. A round
// names the keys of its messages this way, into one buffer a call, rather
// than each entry keeping its own strings.
func (l *Limiter) appendPartKeys(dst []byte, key string, j int, at layout, g int) ([]byte, [2]int) {
	var ends [2]int
	for i, kind := range [2]byte{'h', 'a'} {
		dst = l.ks.AppendTagged(dst, l.tags[g])
		dst = append(dst, kind)
		if at.shards > 1 || at.gen > 0 {
			dst = append(dst, '#')
			dst = strconv.AppendInt(dst, int64(j), 10)
			dst = append(dst, '.')
			dst = strconv.AppendInt(dst, int64(at.shards), 10)
			if at.gen > 0 {
				dst = append(dst, '.')
				dst = strconv.AppendInt(dst, int64(at.gen), 10)
			}
		}
		dst = append(dst, ':')
		dst = append(dst, key...)
		ends[i] = len(dst)
	}
	return dst, ends
}

// appendKeysOf appends the names of e's keys to dst, as appendPartKeys
// does for e's part in its layout.
func (l *Limiter) appendKeysOf(dst []byte, e *entry, g int) ([]byte, [2]int) {
	return l.appendPartKeys(dst, e.owner, int(e.shard), e.layout(), g)
}

// knownParts returns the bucket and allowances keys of every part of key
// in the layouts this instance knows it in: whole, and with home (nil if
// none) live, home's and the one the configuration gives home's limit.
func (l *Limiter) knownParts(key string, home *entry) [][2]string {
	layouts := []layout{{shards: 1}}
	if home != nil && !home.isDead() {
		layouts = append(layouts, home.layout())
		if s, err := l.shardCount(key, *home.limit.Load()); err == nil {
			layouts = append(layouts, layout{shards: s})
		}
	}
	slices.SortFunc(layouts, func(a, b layout) int { return cmp.Or(cmp.Compare(a.shards, b.shards), cmp.Compare(a.gen, b.gen)) })
	var keys [][2]string
	for _, at := range slices.Compact(layouts) {
		for j := range at.shards {
			bucket, allowances := l.partKeys(key, j, at)
			keys = append(keys, [2]string{bucket, allowances})
		}
	}
	return keys
}

// eachPart calls f with home and each part of home's key that this
// instance tracks, in home's layout; with none if home is nil.
func (l *Limiter) eachPart(home *entry, f func(*entry)) {
	if home == nil {
		return
	}
	at := home.layout()
	for j := range at.shards {
		if j == int(home.shard) {
			f(home)
		} else if e := l.parts.get(partName(home.owner, j, at)); e != nil {
			f(e)
		}
	}
}

// shardCount returns how many parts key is split into under limit: what
// WithSplitKeys says, as far as the limit splits (sharding.Fit).
func (l *Limiter) shardCount(key string, limit hybridlimit.Limit) (int, error) {
	if l.cfg.shards == nil {
		return 1, nil
	}
	s := l.cfg.shards(key, limit)
	if err := sharding.CheckShards(s); err != nil {
		return 0, fmt.Errorf("sync: key %q: %w", key, err)
	}
	return sharding.Fit(limit, s), nil
}

// partGroup returns the slot group of part j of s of key.
func (l *Limiter) partGroup(key string, j, s int) int {
	if s == 1 {
		return l.group(key)
	}
	return sharding.Group(l.group(key), j, s, len(l.tags))
}

// partLimit returns the limit e's part enforces.
func partLimit(e *entry) hybridlimit.Limit { return e.partOf(*e.limit.Load()) }

// maxCost returns the largest cost a decision on e's key may have under
// limit: its burst, or for a split key the smallest part's, Burst/S
// (sharding.Quota gives the remainder to the first parts). The fast and
// the slow path both check it before any allowance pays.
func (e *entry) maxCost(limit hybridlimit.Limit) int64 {
	if e.shards == 1 {
		return limit.Burst // no division on a whole key's fast path
	}
	return limit.Burst / int64(e.shards)
}

// checkCost refuses a cost that no allowance at hand could pay: more than
// maxCost.
func (e *entry) checkCost(limit hybridlimit.Limit, cost int64) error {
	if m := e.maxCost(limit); cost > m {
		return fmt.Errorf("sync: %w: cost %d is more than a part's burst %d (%s split %d ways)",
			hybridlimit.ErrCostExceedsBurst, cost, m, limit, e.shards)
	}
	return nil
}

// partName is the name of part j of key in layout at in the parts table.
func partName(key string, j int, at layout) string {
	return strconv.Itoa(j) + "." + strconv.Itoa(at.shards) + "." + strconv.Itoa(at.gen) + ":" + key
}

// home returns the part of a key split s ways that this instance spends
// first.
func (l *Limiter) home(key string, s int) int {
	if s == 1 {
		return 0
	}
	return sharding.Home(l.cfg.instanceID, key, s)
}

// entry returns the live entry for key, split into shards parts, creating
// it or updating its limit: the entry of this instance's home part of a
// split key.
func (l *Limiter) entry(key string, limit hybridlimit.Limit, shards int) (*entry, error) {
	at := layout{shards: shards}
	return l.lookup(l.table, key, key, limit, l.home(key, at.shards), at)
}

// part returns the live entry of part j of key in layout at, which is not
// the home part.
func (l *Limiter) part(key string, limit hybridlimit.Limit, j int, at layout) (*entry, error) {
	return l.lookup(l.parts, partName(key, j, at), key, limit, j, at)
}

// layoutEntries returns the entries this instance has of home's key in
// home's layout, home first: the parts it has spent from or asked.
func (l *Limiter) layoutEntries(home *entry) []*entry {
	from := home.layout()
	old := []*entry{home}
	for j := range from.shards {
		if j != int(home.shard) {
			if e := l.parts.get(partName(home.owner, j, from)); e != nil {
				old = append(old, e)
			}
		}
	}
	return old
}

// chargeParts charges cost to the parts of key in home's layout at t,
// each its share (sharding.Share), and returns the home entry (the one
// that took its place, if it was replaced meanwhile) and the serial of the
// round that carries what the parts owe, 0 if they owe nothing.
func (l *Limiter) chargeParts(key string, limit hybridlimit.Limit, shards int, home *entry, cost, t int64) (*entry, uint64, error) {
	var serial uint64
	var charged int64
	at := home.layout()
	for j := range at.shards {
		share := sharding.Share(cost, j, at.shards)
		e, owed, err := l.chargePart(key, limit, shards, j, at, share, t)
		if err != nil {
			if j == 0 {
				return nil, 0, err
			}
			return nil, 0, fmt.Errorf("sync: %d of a charge of %d charged to key %q, on the first %d of its %d parts: %w",
				charged, cost, key, j, at.shards, err)
		}
		charged += share
		if j == int(home.shard) {
			home = e
		}
		if owed > 0 {
			serial = max(serial, l.flag(e, 0, false))
		}
	}
	return home, serial, nil
}

// chargePart charges share to part j of key in layout at (the home part,
// for a whole key) at t, and returns the entry charged and what it owes
// after: the entry that took its place if the one looked up was evicted
// meanwhile, and the home part of the key's layout if the key moved to
// another (a move carries what the old parts owe to it the same way).
func (l *Limiter) chargePart(key string, limit hybridlimit.Limit, shards, j int, at layout, share, t int64) (*entry, int64, error) {
	for {
		e, err := l.entry(key, limit, shards)
		if err == nil && e.layout() == at && j != int(e.shard) {
			e, err = l.part(key, limit, j, at)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("sync: a charge of key %q not recorded: %w", key, err)
		}
		owed, ok, err := l.charge(e, share, t)
		if err != nil || ok {
			return e, owed, err
		}
	}
}

// fallOverEvery is how many sync intervals apart a split key's home turns
// to another part at most (fallOver).
const fallOverEvery = 2

// fallOver looks beyond the home part of a split key when it has no
// allowance: it spends from another part that holds some; while Redis
// has not reported home empty, it fetches from home; else from the part
// it last turned to, while that one has tokens to spare (spare); else it
// turns to the next sibling that may have some, but at most once every
// fallOverEvery sync intervals and to a different one each time. The
// instances' home parts spread them over the parts, which then drain
// alike: a sibling of an empty home is most likely kept empty by its own
// instances, and every message asking it costs its node as much as one
// of theirs while it admits nothing more in all. A part that does have
// tokens to spare (too few instances call it home, or they ask for less)
// is found within a few turns and kept while it lasts. When it may ask
// none, it denies until the soonest part refills.
func (l *Limiter) fallOver(home *entry, limit hybridlimit.Limit, cost int64, now time.Time, src hybridlimit.Source) (*entry, hybridlimit.Result, bool) {
	s, at, t := int(home.shards), home.layout(), l.nanos(now)
	parts := make([]*entry, s)
	for j := range s {
		if j == int(home.shard) {
			parts[j] = home
			continue
		}
		p, err := l.part(home.owner, limit, j, at)
		if err != nil {
			continue // table full: make do with the parts there are
		}
		if n := l.pay(p, cost); n >= 0 {
			return nil, l.admitted(p, limit, n, src), true
		}
		parts[j] = p
	}
	if home.denyUntil.Load() <= t {
		return home, hybridlimit.Result{}, false
	}
	// The part turned to last, once it has answered the turn: a decision
	// meanwhile asking it too would only send the key's message again.
	if via := parts[home.via.Load()]; via != home && l.spare(via, t) && via.heardAt.Load() >= home.fellOver.Load() {
		return via, hybridlimit.Result{}, false
	}
	if asked := home.fellOver.Load(); asked == 0 || t-asked >= fallOverEvery*int64(l.cfg.interval) {
		turn := int(t / int64(l.cfg.interval))
		for i := range s - 1 {
			j := (int(home.shard) + 1 + (turn+i)%(s-1)) % s
			if l.worthTurning(parts[j], t) {
				home.via.Store(int32(j))
				home.fellOver.Store(max(t, 1))
				return parts[j], hybridlimit.Result{}, false
			}
		}
	}
	soonest := l.retryAfter(home, cost, t)
	for _, p := range parts {
		if p != nil && p.denyUntil.Load() > t {
			soonest = min(soonest, l.retryAfter(p, cost, t))
		}
	}
	l.stats.denied(l.stats.deniedRemote, home, t)
	return nil, denied(limit, soonest, src), true
}

// spare reports whether p, a part of a split key other than home, has
// tokens to spare at t (ns of the limiter's clock) by Redis's last word on
// it: it has not reported the part empty, and its last reply left at
// least a sync interval's refill in the bucket (a token, for a slower
// part). A part its own instances drain every round holds less than that
// after any ask: what refilled since the last one.
func (l *Limiter) spare(p *entry, t int64) bool {
	return p != nil && p.denyUntil.Load() <= t &&
		float64(p.left.Load()) >= max(1, partLimit(p).TokensIn(l.cfg.interval))
}

// worthTurning reports whether fallOver may turn to p at t: p has tokens
// to spare, or Redis's last word on it is fallOverEvery intervals old and
// was not that it is empty.
func (l *Limiter) worthTurning(p *entry, t int64) bool {
	return l.spare(p, t) || p != nil && p.denyUntil.Load() <= t && t-p.heardAt.Load() >= fallOverEvery*int64(l.cfg.interval)
}

// heardLeft records left, the tokens Redis said e's bucket holds, and the
// key's tokens left that decisions report: left itself for a whole key,
// the sum over its parts for a split one (sumParts).
func (l *Limiter) heardLeft(e *entry, left int64) {
	e.left.Store(left)
	if e.whole() {
		e.remaining.Store(left)
		return
	}
	l.sumParts(e)
}

// sumParts returns the tokens left in the global buckets of every part of
// e's key, as of each part's last sync, a part this instance has not heard
// of counting as full, and stores the sum where decisions report it.
func (l *Limiter) sumParts(e *entry) {
	at := e.layout()
	s := at.shards
	limit := *e.limit.Load()
	home := l.home(e.owner, s)
	found := make([]*entry, 0, s)
	var sum int64
	for j := range s {
		var p *entry
		if j == home {
			p = l.table.get(e.owner)
		} else {
			p = l.parts.get(partName(e.owner, j, at))
		}
		if p == nil || p.layout() != at {
			sum += sharding.Part(limit, j, s).Burst
			continue
		}
		sum += p.left.Load()
		found = append(found, p)
	}
	for _, p := range found {
		p.remaining.Store(sum)
	}
}

// outOfTouch reports whether e is in a moved layout of its key that has
// heard nothing from Redis for half a marker's life. The key's home entry
// speaks for the layout: a part asked rarely is not out of touch while
// home syncs. The caller holds e.mu.
func (l *Limiter) outOfTouch(e *entry, now time.Time) bool {
	if e.gen == 0 {
		return false
	}
	heard := e.heardAt.Load()
	if h := l.table.get(e.owner); h != nil && h.layout() == e.layout() {
		heard = max(heard, h.heardAt.Load())
	}
	return time.Duration(l.nanos(now)-heard) >= l.markerLife(*e.limit.Load())/2
}

// turnedTo reports whether e, a part of a split key other than its home,
// serves: home is empty by Redis's last word, e is the part home's
// decisions turned to last (fallOver), and e has tokens to spare (spare).
// Such a part leases as home would; any other fetches only what waits. So
// a split key costs each instance the messages of home, and of one other
// part only while that part has tokens its own instances leave.
func (l *Limiter) turnedTo(e *entry, now time.Time) bool {
	h := l.table.get(e.owner)
	t := l.nanos(now)
	return h != nil && h.layout() == e.layout() && h.denyUntil.Load() > t &&
		int(h.via.Load()) == int(e.shard) && l.spare(e, t)
}
