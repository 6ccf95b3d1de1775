package sync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
	"github.com/hybridlimit/hybridlimit/sharding"
)

// AutoSplit configures WithAutoSplit.
type AutoSplit struct {
	Max   int           // parts of a hot key, 2 to sharding.MaxShards
	Above float64       // messages a second, all instances, above which a key is hot
	Below float64       // the rate under which a split key cools (default Above/4)
	Hold  time.Duration // how long cool before merged back (default 40 intervals, at least 30s)
}

// errReshardRace is what a reshard returns that found the key's layout
// changed by another instance (or its view of it stale): nothing moved.
var errReshardRace = errors.New("sync: key resharded meanwhile")

// reshardHot runs automatic sharding: once a check window (the sync
// interval, at least a second) has passed since the last check, it splits
// the keys the window found hot and merges back the split keys that
// stayed cool; sooner, it does nothing, so a rate is never judged on a few
// messages. The loop calls it every interval. It does nothing without
// WithAutoSplit.
func (l *Limiter) reshardHot(ctx context.Context) error {
	if l.cfg.auto.Max == 0 {
		return nil
	}
	errs := []error{l.closeLeftOpen(ctx)}
	now := l.cfg.clock.Now()
	live := float64(max(l.live.Load(), 1))
	hot, window := l.heat.drain(now, l.reshardEvery())
	if window <= 0 {
		return errors.Join(errs...)
	}
	// In key order, so that a simulation in virtual time replays exactly.
	for _, key := range slices.Sorted(maps.Keys(hot)) {
		rate := float64(hot[key]) / window.Seconds() * live
		home := l.table.get(key)
		if home == nil || home.isDead() || rate < l.cfg.auto.Above {
			continue
		}
		limit := *home.limit.Load()
		to := sharding.Fit(limit, l.cfg.auto.Max)
		if from := home.layout(); to > from.shards {
			l.cool.delete(key)
			errs = append(errs, l.reshard(ctx, key, limit, from, layout{to, from.gen + 1}))
		}
	}
	var split []*entry
	l.table.each(func(home *entry) {
		if home.gen != 0 && !home.isDead() {
			split = append(split, home)
		}
	})
	slices.SortFunc(split, func(a, b *entry) int { return strings.Compare(a.owner, b.owner) })
	for _, home := range split {
		key := home.owner
		rate := float64(hot[key]) / window.Seconds() * live
		since := l.cool.note(key, now, rate < l.cfg.auto.Below)
		from := home.layout()
		limit := *home.limit.Load()
		s, err := l.shardCount(key, limit)
		if err != nil {
			continue
		}
		// A key merged back has its configured parts already, under a
		// later generation: it stays there, its markers kept, until it
		// is hot again. Merging it again would only move it once more.
		if from.shards == s || since.IsZero() || now.Sub(since) < l.cfg.auto.Hold {
			l.keepMarkers(ctx, key, limit, from, now)
			continue
		}
		l.cool.delete(key)
		errs = append(errs, l.reshard(ctx, key, limit, from, layout{s, from.gen + 1}))
	}
	return errors.Join(errs...)
}

// reshardEvery is the check window of automatic sharding.
func (l *Limiter) reshardEvery() time.Duration { return max(l.cfg.interval, time.Second) }

// markerLife is how long the markers of a moved key's configured layout
// live without renewal: long enough for any instance to hear of the move,
// and longer than the key's state in Redis (its refill time), so markers
// outlive the state of an abandoned layout.
func (l *Limiter) markerLife(limit hybridlimit.Limit) time.Duration {
	return max(10*time.Minute, 2*limit.Refill()+l.ledgerTTLDuration())
}

// keepMarkers renews the markers of a split key's configured layout a
// quarter of their life before they lapse: without them a new instance
// would find that layout's buckets absent, which means full.
func (l *Limiter) keepMarkers(ctx context.Context, key string, limit hybridlimit.Limit, at layout, now time.Time) {
	life := l.markerLife(limit)
	if !l.cool.renewDue(key, now, life/4) {
		return
	}
	def, err := l.shardCount(key, limit)
	if err != nil {
		return
	}
	l.stepAll(ctx, key, layout{def, 0}, limit, scripts.ReshardMark, at.marker(), life.Milliseconds(), nil)
}

// reshard moves key from layout from to layout to, holding a lock in Redis
// so that one instance at a time does it:
//
//  0. check that every old part is open, or another instance moved the
//     key already (errReshardRace, nothing touched);
//  1. open the new parts empty (absent would mean full);
//  2. close the old parts, which hands back the tokens each held, less what
//     it refilled since step 1 (the new parts refill from then on);
//  3. credit those tokens to the new parts, in proportion to their bursts;
//  4. point the markers of the configured layout, if it is not the old one,
//     to the new layout.
//
// The allowance instances hold moves with them (see move). A failure after
// step 2 leaves tokens uncredited: the key under-admits, never over. An old
// part that fails to close serves its instances on top of the new layout
// until Reshard closes it again, which it tries every time it runs.
func (l *Limiter) reshard(ctx context.Context, key string, limit hybridlimit.Limit, from, to layout) error {
	return l.locked(ctx, key, func(ctx context.Context) error { return l.reshardLocked(ctx, key, limit, from, to) })
}

// locked runs f holding key's reshard lock in Redis, so that one instance
// at a time moves the key, and returns errReshardRace if another holds it.
func (l *Limiter) locked(ctx context.Context, key string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 4*l.cfg.roundTimeout)
	defer cancel()
	lock := l.ks.Tagged(l.tags[l.group(key)], "r:"+key)
	if err := l.lockRun(ctx, lock, 4*l.cfg.roundTimeout); err != nil {
		return errors.Join(errReshardRace, err)
	}
	defer func() {
		// Released even when the move's context has ended; the lock's TTL
		// covers a release that fails.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.roundTimeout)
		defer cancel()
		_ = l.lockRun(uctx, lock, 0)
	}()
	return f(ctx)
}

// errLockHeld is what taking a lock that another holds returns.
var errLockHeld = errors.New("sync: reshard lock held by another instance")

// lockRun takes the lock for d, or releases it for d == 0 (scripts.Lock).
func (l *Limiter) lockRun(ctx context.Context, lock string, d time.Duration) error {
	reply, err := scripts.Lock.Run(ctx, l.rdb, []string{lock}, 0, l.cfg.instanceID, d.Milliseconds())
	if err != nil {
		return fmt.Errorf("sync: reshard lock: %w", err)
	}
	done, err := scripts.ParseLockReply(reply)
	if err != nil {
		return fmt.Errorf("sync: reshard lock: %w", err)
	}
	if !done && d > 0 {
		return errLockHeld
	}
	return nil
}

// reshardLocked is reshard. The caller holds key's reshard lock.
func (l *Limiter) reshardLocked(ctx context.Context, key string, limit hybridlimit.Limit, from, to layout) error {
	// The old layout must still be the key's: an instance that heard of a
	// move late would open the new parts over ones the move already opened
	// and that have filled up since (full reads as absent), emptying them.
	if n, err := l.stepAll(ctx, key, from, limit, scripts.ReshardCheck, "", 0, nil); err != nil || n != from.shards {
		return errors.Join(fmt.Errorf("%w: %s has %d of %d parts of layout %d.%d open", errReshardRace, key, n, from.shards, from.shards, from.gen), err)
	}
	mv := oldParts{limit: limit, from: from, to: to}
	if n, err := l.stepAll(ctx, key, to, limit, scripts.ReshardOpen, "", 0, func(_ int, _ int64, at time.Time) {
		if mv.opened.IsZero() || at.Before(mv.opened) {
			mv.opened = at
		}
	}); err != nil || n != to.shards {
		return errors.Join(fmt.Errorf("%w: %s opened %d of %d new parts", errReshardRace, key, n, to.shards), err)
	}
	closed, held, closeErr, creditErr := l.closeOld(ctx, key, mv)
	err := errors.Join(closeErr, creditErr)
	if closed == 0 {
		return errors.Join(fmt.Errorf("%w: %s closed no old part", errReshardRace, key), err)
	}
	if closeErr != nil {
		// An old part left open would serve its instances on top of the
		// new layout, which has the key's whole rate: close it later.
		l.keepClosing(key, mv)
	}
	life := l.markerLife(limit).Milliseconds()
	if from.gen != 0 {
		def, derr := l.shardCount(key, limit)
		if derr == nil {
			_, derr = l.stepAll(ctx, key, layout{def, 0}, limit, scripts.ReshardMark, to.marker(), life, nil)
		}
		err = errors.Join(err, derr)
	}
	l.stats.reshards.Add(1)
	l.cfg.logger.Info("sync: key resharded", "key", key, "from", from.shards, "to", to.shards, "generation", to.gen, "credited", held)
	l.move(key, to, l.cfg.clock.Now())
	return err
}

// oldParts is a move's old layout, to be closed into markers of the new.
type oldParts struct {
	limit    hybridlimit.Limit
	from, to layout
	opened   time.Time // the new parts' opening, by the Redis clock
}

// closeOld closes the old parts of a move (closing a closed one does
// nothing) and credits what they held to the new parts, less what they
// refilled since the new parts opened, which those refill too. It
// returns how many it closed, the tokens credited, the errors of the
// closes, which leave parts open, and those of the credits, which only
// under-admit.
func (l *Limiter) closeOld(ctx context.Context, key string, mv oldParts) (closed int, held int64, closeErr, creditErr error) {
	life := l.markerLife(mv.limit).Milliseconds()
	closed, closeErr = l.stepAll(ctx, key, mv.from, mv.limit, scripts.ReshardClose, mv.to.marker(), life, func(j int, tokens int64, at time.Time) {
		part := partOf(mv.limit, j, mv.from.shards)
		held += max(0, tokens-int64(part.TokensIn(at.Sub(mv.opened))))
	})
	for j, c := range spread(held, mv.limit, mv.to.shards) {
		if c > 0 {
			if _, err := l.reshardStep(ctx, l.bucketOf(key, j, mv.to), partOf(mv.limit, j, mv.to.shards), scripts.ReshardCredit, "", c); err != nil {
				creditErr = errors.Join(creditErr, err)
			}
		}
	}
	return closed, held, closeErr, creditErr
}

// keepClosing records a move whose old parts did not all close, for
// closeLeftOpen to try again.
func (l *Limiter) keepClosing(key string, mv oldParts) {
	l.unclosedMu.Lock()
	defer l.unclosedMu.Unlock()
	if l.unclosed == nil {
		l.unclosed = make(map[string]oldParts)
	}
	l.unclosed[key] = mv
}

// closeLeftOpen closes again, under the reshard lock, the old parts that
// moves of this instance left open (a master unreachable at that moment):
// until then they serve their instances on top of the new layout.
func (l *Limiter) closeLeftOpen(ctx context.Context) error {
	l.unclosedMu.Lock()
	left := l.unclosed
	l.unclosed = nil
	l.unclosedMu.Unlock()
	var errs []error
	// In key order, so that a simulation in virtual time replays exactly.
	for _, key := range slices.Sorted(maps.Keys(left)) {
		mv := left[key]
		open := true // until a try finds every part closed
		err := l.locked(ctx, key, func(ctx context.Context) error {
			_, _, closeErr, creditErr := l.closeOld(ctx, key, mv)
			open = closeErr != nil
			return errors.Join(closeErr, creditErr)
		})
		if open {
			l.keepClosing(key, mv)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stepAll runs op on every part of key in layout at and returns how many
// changed their key; each reports its tokens and time to f.
func (l *Limiter) stepAll(ctx context.Context, key string, at layout, limit hybridlimit.Limit, op scripts.ReshardOp, marker string, n int64, f func(j int, tokens int64, at time.Time)) (int, error) {
	done := 0
	var errs []error
	for j := range at.shards {
		r, err := l.reshardStep(ctx, l.bucketOf(key, j, at), partOf(limit, j, at.shards), op, marker, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.Done {
			done++
			if f != nil {
				f(j, r.Tokens, r.At)
			}
		}
	}
	return done, errors.Join(errs...)
}

// reshardStep runs one reshard op on one bucket.
func (l *Limiter) reshardStep(ctx context.Context, bucket string, part hybridlimit.Limit, op scripts.ReshardOp, marker string, n int64) (scripts.ReshardReply, error) {
	s := scripts.ReshardStep{Op: op, Rate: part.Rate, PeriodUS: part.Period.Microseconds(), Burst: part.Burst, Marker: marker, N: n}
	reply, err := scripts.Reshard.Run(ctx, l.rdb, []string{bucket}, append([]any{0}, s.Args()...)...)
	if err != nil {
		return scripts.ReshardReply{}, fmt.Errorf("sync: reshard %s: %w", op, err)
	}
	r, err := scripts.ParseReshardReply(reply)
	if err != nil {
		return scripts.ReshardReply{}, fmt.Errorf("sync: reshard %s: %w", op, err)
	}
	return r, nil
}

func (l *Limiter) bucketOf(key string, j int, at layout) string {
	b, _ := l.partKeys(key, j, at)
	return b
}

// spread divides tokens over s parts of limit in proportion to their
// bursts, none above its burst.
func spread(tokens int64, limit hybridlimit.Limit, s int) []int64 {
	out := make([]int64, s)
	tokens = min(tokens, limit.Burst)
	left := tokens
	for j := range out {
		// tokens x b / burst in 128 bits: both may reach 2^40. The
		// quotient fits, since tokens <= burst.
		b := partOf(limit, j, s).Burst
		hi, lo := bits.Mul64(uint64(tokens), uint64(b))
		q, _ := bits.Div64(hi, lo, uint64(limit.Burst))
		out[j] = min(b, int64(q))
		left -= out[j]
	}
	for j := 0; left > 0; j = (j + 1) % s {
		if out[j] < partOf(limit, j, s).Burst {
			out[j]++
			left--
		}
	}
	return out
}

// move switches this instance's entries for key to layout to: a new home
// entry takes the place of the old one, and the allowance the old layout's
// entries hold unspent moves into it, with a ledger base that says so, so
// that when it is handed back the new parts receive it. Moves come from
// the replies of a round and from Reshard, which may run at once: moveMu
// keeps them one at a time.
//
// While a message of an old entry is in flight the move waits: its reply
// may bring tokens (a grant Redis made before the old part closed, or a
// return the closed part refused, which the reply's total gives back), and
// they must reach a live entry to move with the rest; an entry retired
// under them would drop them, and the key would under-admit by as much.
// The round that carries the message makes the move once its replies are
// applied (movePending).
func (l *Limiter) move(key string, to layout, now time.Time) {
	l.moveMu.Lock()
	defer l.moveMu.Unlock()
	l.moveLocked(key, to, now, false)
}

// moveBack moves key's entries from a moved layout, whose markers may have
// lapsed (see prepare), back to its configured layout, whose markers the
// instances that split the key renew and which send it on to where the
// key lives now.
func (l *Limiter) moveBack(key string, now time.Time) {
	home := l.table.get(key)
	if home == nil || home.isDead() {
		return
	}
	s, err := l.shardCount(key, *home.limit.Load())
	if err != nil {
		return
	}
	l.moveMu.Lock()
	defer l.moveMu.Unlock()
	l.moveLocked(key, layout{s, 0}, now, true)
}

// movePending makes the moves that waited for a round in flight. The
// caller has applied that round's replies.
func (l *Limiter) movePending(now time.Time) {
	l.moveMu.Lock()
	defer l.moveMu.Unlock()
	if len(l.pending) == 0 {
		return
	}
	// In key order: a move numbers a new entry, so that a simulation in
	// virtual time replays exactly.
	for _, key := range slices.Sorted(maps.Keys(l.pending)) {
		l.moveLocked(key, l.pending[key], now, false)
	}
}

// moveLocked is move, and moveBack when back is set: a move to an
// earlier generation, the configured one. The caller holds moveMu.
func (l *Limiter) moveLocked(key string, to layout, now time.Time, back bool) {
	if p, ok := l.pending[key]; ok {
		if p.gen > to.gen {
			to, back = p, false // a later layout than the marker that called
		}
		delete(l.pending, key)
	}
	home := l.table.get(key)
	if home == nil || home.isDead() {
		return
	}
	from := home.layout()
	if from == to || (from.gen != 0 && to.gen <= from.gen && !back) {
		return // already there, or a marker older than what we know
	}
	old := l.layoutEntries(home)
	// Locked together, in this order (only moves lock more than one entry,
	// one move at a time), so that no round starts a message for one of
	// them between the check for messages in flight and its retirement.
	l.retiring.Lock()
	for _, e := range old {
		l.lockGather(e)
	}
	unlock := func() {
		for _, e := range old {
			l.scatterUnlock(e)
		}
		l.retiring.Unlock()
	}
	// The sweep may have evicted home meanwhile: a new entry will ask Redis.
	if home.isDead() || !l.movable(key, old, to, back) {
		unlock()
		return
	}
	limit := *home.limit.Load()
	next := l.newEntry(key, key, limit, now, l.home(key, to.shards), to)
	l.table.replace(home, next)
	carried, owed, since := l.retireAll(old, home, l.nanos(now))
	// The key's demand does not change with its layout: measured afresh,
	// it would start at nothing, and the allowance carried would look
	// like excess and go back to the new home part at once, which holds
	// only its share of the burst and may not take it all.
	use := home.ledger.Use
	unlock()
	share := l.carry(key, limit, int(next.shard), carried, now, to)
	l.lockGather(next)
	next.ledger.Give(&next.avail, share)
	next.ledger.Acked = share // the base the new ledger starts from
	next.ledger.Issued += owed
	l.owing.add(next, owed, since)
	next.ledger.Use.Rate, next.ledger.Use.UsedAt = use.Rate, use.UsedAt
	l.scatterUnlock(next)
	l.sched.at(next, l.nanos(now))
	l.stats.moves.Add(1)
}

// movable reports whether the entries old of key may move to layout to
// now. A message in flight makes the move wait for its round (pending);
// on a move back, a grant whose reply was lost stays in the old ledger
// until a reply restates it: moved now, it would be lost. The caller holds
// moveMu and the entries' mutexes.
func (l *Limiter) movable(key string, old []*entry, to layout, back bool) bool {
	for _, e := range old {
		if back && e.ledger.Unacked {
			return false
		}
		if e.ledger.InFlight {
			if l.pending == nil {
				l.pending = make(map[string]layout)
			}
			l.pending[key] = to
			return false
		}
	}
	return true
}

// retireAll retires the old entries of a move, whose home is home, and
// returns the allowance they held, what they owed, and since when (t if
// nothing). What they admitted counts as evicted but what they owed,
// which the new home owes and counts. The caller holds every entry's
// mutex and l.retiring.
func (l *Limiter) retireAll(old []*entry, home *entry, t int64) (carried, owed, since int64) {
	since = t
	for _, e := range old {
		took, killed := e.retire()
		if !killed {
			continue // evicted meanwhile by the sweep, which removes and counts it
		}
		carried += took
		o, s := l.owing.remove(e)
		if o > 0 {
			owed += o
			since = min(since, s)
		}
		l.stats.evictedAdmitted.Add(uint64(max(e.ledger.Issued-o, 0)))
		if e != home {
			l.parts.delete(e)
			l.tracked.Add(-1)
		}
	}
	return carried, owed, since
}

// carry gives the allowance a move carried to the new parts in proportion
// to their bursts, each share held by this instance's entry of that part
// with the share as its ledger's base: a part holds only its share of the
// burst, and one taking all of it back could overflow and lose the excess.
// A part other than home hands its share back at its first sync, unless a
// decision spends it first. It returns the share of the new home, part
// j0.
func (l *Limiter) carry(key string, limit hybridlimit.Limit, j0 int, carried int64, now time.Time, to layout) int64 {
	shares := spread(carried, limit, to.shards)
	for j, c := range shares {
		if j == j0 || c == 0 {
			continue
		}
		if p := l.carrier(key, limit, now, j, to); p != nil {
			l.lockGather(p)
			p.ledger.Give(&p.avail, c)
			p.ledger.Acked = c
			l.scatterUnlock(p)
			l.sched.at(p, l.nanos(now))
		} else {
			shares[j0] += c
		}
	}
	return shares[j0]
}

// carrier returns a new entry for part j of key in layout at, to hold a
// share of what a move carries, or nil if the entry exists already (its
// ledger has a total the share would not be part of) or the limiter
// tracks all the keys it may.
func (l *Limiter) carrier(key string, limit hybridlimit.Limit, now time.Time, j int, at layout) *entry {
	if l.tracked.Load() >= int64(l.cfg.maxKeys) {
		return nil
	}
	name := partName(key, j, at)
	p, created := l.parts.getOrInsert(name, func() *entry { return l.newEntry(name, key, limit, now, j, at) })
	if !created {
		return nil
	}
	l.tracked.Add(1)
	return p
}

// drop removes e from t and retires it, counting what it admitted but
// what it owes, and returns that, for the entry that replaces e to
// report.
func (l *Limiter) drop(t *table, e *entry) (owed, since int64) {
	l.retiring.Lock()
	defer l.retiring.Unlock()
	l.lockGather(e)
	_, killed := e.retire()
	issued := e.ledger.Issued
	if killed {
		owed, since = l.owing.remove(e)
	}
	l.scatterUnlock(e)
	if !killed {
		return 0, 0 // evicted meanwhile by the sweep, which removes and counts it
	}
	t.delete(e)
	l.tracked.Add(-1)
	l.stats.evictedAdmitted.Add(uint64(max(issued-owed, 0)))
	return owed, since
}

// retire takes all of e's unspent allowance and marks it dead, so that
// decisions holding it look the key up again. It returns what it took,
// and whether it killed e: not if the sweep had evicted it, holding
// nothing. The caller holds e.mu.
func (e *entry) retire() (took int64, killed bool) {
	if e.avail.Load() < evicted/2 {
		e.marks.Or(markDead)
		return 0, false
	}
	for {
		took += e.ledger.Withdraw(&e.avail, e.avail.Load())
		if e.evict() {
			return took, true
		}
		runtime.Gosched() // a decision is putting back a cost it could not pay
	}
}

// relocate makes the moves the round's replies call for (a part closed,
// a layout out of touch, a move that waited for the round) and drops the
// entries of keys reset meanwhile.
func (r *round) relocate(now time.Time, moved []*message, reset []*entry) {
	l := r.l
	// In key order: a move numbers a new entry, so that a simulation in
	// virtual time replays exactly.
	slices.SortFunc(moved, func(a, b *message) int { return strings.Compare(a.e.owner, b.e.owner) })
	for _, m := range moved {
		// The part is closed: the key lives in the layout its marker names.
		l.move(m.e.owner, layout{int(m.reply.Shards), int(m.reply.Generation)}, now)
	}
	for _, e := range reset {
		// The key was reset (Limiter.Reset) since this entry's ledger was
		// written: what it holds and owes is forgotten with it, and the
		// next decision starts afresh.
		l.drop(l.tableOf(e), e)
	}
	slices.Sort(r.rejoin)
	for _, key := range slices.Compact(r.rejoin) {
		l.moveBack(key, now)
	}
	l.movePending(now)
}
