package sync

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/sync/internal/account"
)

// maxFetches bounds how many batched fetches one decision takes part in
// before it gives up: enough to ride out a fetch that started just before
// the decision registered its demand.
const maxFetches = 3

// slow decides when the key has no local allowance (or is new).
func (l *Limiter) slow(ctx context.Context, now time.Time, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	if err := l.checkCall(key, limit, cost); err != nil {
		return hybridlimit.Result{}, err
	}
	shards, err := l.shardCount(key, limit)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	now = l.at(now)
	deadline := l.cfg.clock.Now().Add(l.cfg.maxWait)
	src := hybridlimit.SourceLocal // until a fetch this decision waits for is answered
	waited := false                // counted in Stats.Waits, once a decision
	var failed error               // the last fetch's, if it failed
	for fetches := 0; ; fetches++ {
		e, err := l.entry(key, limit, shards)
		if err != nil {
			return l.degraded(nil, now, key, limit, cost), nil
		}
		home := e
		if err := e.checkCost(limit, cost); err != nil {
			return hybridlimit.Result{}, err
		}
		if n := l.pay(e, cost); n >= 0 {
			l.spent(e, n, cost)
			return l.admitted(e, limit, n, src), nil
		}
		if e.isDead() {
			continue
		}
		if !e.whole() {
			r, done := hybridlimit.Result{}, false
			if e, r, done = l.fallOver(e, limit, cost, now, src); done {
				return r, nil
			}
		}
		if until := e.denyUntil.Load(); until > l.nanos(now) {
			l.stats.denied(l.stats.deniedRemote, e, l.nanos(now))
			retry := l.retryAfter(e, cost, l.nanos(now))
			return deniedUntil(limit, retry, e.fullIn(limit, retry), src), nil
		}
		// A decision gives up after maxFetches answered rounds only for an
		// entry Redis has answered: one new to it (a part turned to, an
		// entry that took the place of one reset or moved) is asked until
		// the max wait, or a decision Redis answers every time would be
		// handed to the failure policy as if Redis had not.
		gaveUp := fetches >= maxFetches && e.isSynced() || !l.cfg.clock.Now().Before(deadline)
		if l.unreachable(e, failed != nil || gaveUp) {
			// Not a denial of the limit's: the failure policy decides.
			return l.degraded(home, now, key, limit, cost), nil
		}
		if !l.mode.Fetches(e.isSynced()) || gaveUp || l.emptied(e, now) {
			return l.outOfAllowance(e, limit, cost, now, src), nil
		}
		serial := l.flag(e, cost, false)
		if !waited {
			l.stats.waits.Add(1)
			waited = true
		}
		failed = l.fetch(ctx, serial, deadline)
		if ctx.Err() != nil {
			return hybridlimit.Result{}, ctx.Err()
		}
		if failed == nil {
			src = hybridlimit.SourceGlobal
		}
	}
}

// outOfAllowance decides a decision that found no allowance for cost in e
// and waits no longer: it pays after all if a reply has brought enough
// since it last tried (its wait can end as the reply comes, and replies
// are applied under e.mu, where this looks), else it is denied until a
// round brings more.
func (l *Limiter) outOfAllowance(e *entry, limit hybridlimit.Limit, cost int64, now time.Time, src hybridlimit.Source) hybridlimit.Result {
	l.lockGather(e)
	n := e.spend(cost)
	short := l.mode.Short(&e.ledger, &e.avail, cost)
	l.scatterUnlock(e)
	if n >= 0 {
		return l.admitted(e, limit, n, src)
	}
	l.flag(e, 0, true)
	l.stats.denied(l.stats.deniedLocal, e, l.nanos(now))
	retry := max(l.cfg.interval, l.costWait(e, short, l.nanos(now)))
	return deniedUntil(limit, retry, e.fullIn(limit, retry), src)
}

// checkCall returns ErrClosed after Close, and the error of an invalid
// limit, cost or key.
func (l *Limiter) checkCall(key string, limit hybridlimit.Limit, cost int64) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if err := limit.Validate(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := limit.CheckCost(cost); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := hybridlimit.CheckKey(key); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

// unreachable reports whether Redis cannot be asked for e's key: its
// node's breaker is open; or the decision's fetches failed or it gives up
// on them (stuck) while e's message got no reply, still waits for one, or
// waits to be sent; or, in Optimistic mode, which does not fetch for a key
// it has synced, e's last message got no reply.
func (l *Limiter) unreachable(e *entry, stuck bool) bool {
	if l.nodes.of(int(e.group)).breaker.isOpen() {
		return true
	}
	fetchless := !l.mode.Fetches(e.isSynced())
	if !stuck && !fetchless {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if fetchless {
		return e.ledger.Unacked
	}
	return e.ledger.Unacked || e.ledger.InFlight || e.flagged || !e.isSynced()
}

// emptied reports whether Redis said e's bucket was empty less than a
// sync interval ago. Such a key is over its limit: whatever refilled
// since goes to the round the decision flags, not to a decision that
// waits for it, so that a hot key at its limit costs its callers no
// waiting and its instances one message a round, not a fetch each time a
// token comes due. A low limit, decided per request, waits as ever.
func (l *Limiter) emptied(e *entry, now time.Time) bool {
	until := e.denyUntil.Load()
	return until > 0 && l.nanos(now)-until < int64(l.cfg.interval) && !l.lowLimit(e)
}

func (l *Limiter) admitted(e *entry, limit hybridlimit.Limit, avail int64, src hybridlimit.Source) hybridlimit.Result {
	return hybridlimit.Result{
		Limit:      limit,
		Allowed:    true,
		Source:     src,
		Remaining:  min(avail+e.remaining.Load(), limit.Burst),
		ResetAfter: time.Duration(e.resetAfter.Load()),
	}
}

// denied is a denial under limit, retry its wait, the bucket full after a
// refill.
func denied(limit hybridlimit.Limit, retry time.Duration, src hybridlimit.Source) hybridlimit.Result {
	return deniedUntil(limit, retry, limit.Refill(), src)
}

// deniedUntil is a denial under limit, retry its wait, the bucket full
// after full.
func deniedUntil(limit hybridlimit.Limit, retry, full time.Duration, src hybridlimit.Source) hybridlimit.Result {
	return hybridlimit.Result{Limit: limit, Source: src, RetryAfter: max(retry, time.Microsecond), ResetAfter: full}
}

// fullIn returns, for a denial of e's key under limit with the wait retry,
// the time until the key's bucket is full as Redis last said it, as an
// admission's ResetAfter is: for a bucket in debt (a charge) longer than a
// refill. A refill for a key Redis has not answered for, or split (its
// parts fill apart). It reads only e's first cache line, which a denial
// on the fast path reads anyway.
func (e *entry) fullIn(limit hybridlimit.Limit, retry time.Duration) time.Duration {
	if e.isSynced() && e.whole() {
		return max(time.Duration(e.resetAfter.Load()), retry)
	}
	return limit.Refill()
}

// nanos returns t as nanoseconds since the limiter's base reading.
func (l *Limiter) nanos(t time.Time) int64 { return int64(t.Sub(l.base)) }

// at returns the time a decision at now is made at: the clock's for the
// zero time, and never before the limiter was made. Entries keep their
// times from then on (nanos), in which an earlier time would read as "not
// yet" for every deadline Redis never set, and make a split key's turn
// negative.
func (l *Limiter) at(now time.Time) time.Time {
	if now.IsZero() {
		return l.cfg.clock.Now()
	}
	if now.Before(l.base) {
		return l.base
	}
	return now
}

// retryAfter returns how long e, which remembers a denial, denies cost at
// now (nanos): until the denial lapses, and at least until its bucket
// holds the cost. Redis's denial came with the allowance spent, so what e
// holds now is all it can add (Optimistic admitted nothing since: the
// denial came with no allowance).
func (l *Limiter) retryAfter(e *entry, cost, now int64) time.Duration {
	return max(time.Duration(e.denyUntil.Load()-now), l.costWait(e, cost-max(e.avail.Load(), 0), now))
}

// costWait returns how long e's bucket, by Redis's last word on it, takes
// to hold short tokens (mode.short): the wait before a decision can be
// granted the cost that needs them, if no other instance takes them first.
// A denial's RetryAfter is at least that, so that a client asking for 50
// tokens under 100 a minute is told to come back when 50 are there, not
// when the next one is. 0 when e needs none or Redis has not answered
// for it.
func (l *Limiter) costWait(e *entry, short, now int64) time.Duration {
	need := short
	if need <= 0 || !e.isSynced() {
		return 0
	}
	part := partLimit(e)
	perToken := float64(part.Period) / float64(part.Rate)
	// The bucket is full at heardAt + resetAfter and holds need tokens
	// (Burst - need) tokens' time before that.
	full := e.heardAt.Load() + e.resetAfter.Load()
	wait := float64(full-now) - float64(part.Burst-need)*perToken
	return time.Duration(max(math.Ceil(wait), 0))
}

// lookup finds or creates the entry called name in t, of part j of key in
// layout at, unless at.supersedes the one there.
func (l *Limiter) lookup(t *table, name, key string, limit hybridlimit.Limit, j int, at layout) (*entry, error) {
	var owed, since int64 // what an entry dropped for another shard count owed
	for {
		if e := t.get(name); e != nil {
			if e.isDead() {
				t.delete(e)
				continue
			}
			if at.supersedes(e) {
				// The key's shard count changed with its limit or the
				// configuration: start afresh. What the old entry holds
				// unspent goes unused, an undershoot of at most its lease;
				// what it owes the new one reports.
				o, s := l.drop(t, e)
				if o > 0 {
					owed, since = owed+o, s
				}
				continue
			}
			if *e.limit.Load() != limit {
				l.relimit(e, limit)
			}
			return e, nil
		}
		if l.tracked.Load() >= int64(l.cfg.maxKeys) {
			return nil, fmt.Errorf("%w: %d", errTooManyKeys, l.cfg.maxKeys)
		}
		// A new entry starts at the limiter's clock, not the caller's
		// time (AllowAt): its idle hold, demand and schedule count on that
		// clock, and a caller's time years ahead held a lease and the
		// entry in memory until the clock caught up.
		now := l.cfg.clock.Now()
		e, created := t.getOrInsert(name, func() *entry { return l.newEntry(name, key, limit, now, j, at) })
		if created {
			l.tracked.Add(1)
			l.sched.at(e, l.nanos(now))
		}
		if owed > 0 {
			l.lockGather(e)
			if !e.isDead() {
				e.ledger.Issued += owed
				l.owing.add(e, owed, since)
				owed = 0
			}
			l.scatterUnlock(e)
		}
		if !e.isDead() {
			return e, nil
		}
	}
}

// relimit moves e to limit, which a decision brought. Redis keeps the
// tokens the key's bucket holds under the new limit, cut to its burst
// (sync.lua); here a denial heard under a tighter limit is dropped (under
// this one, more burst or a faster rate, the bucket may hold tokens), and
// under a lowered burst what e holds is dropped, not handed back: handed
// back, it would fill the cut bucket again. So a lowered limit clamps at
// once, the bucket's tokens all there is, rather than after the leases of
// the old one are spent. Redis keeps counting the dropped tokens as
// granted; Stats.Dropped counts them.
func (l *Limiter) relimit(e *entry, limit hybridlimit.Limit) {
	if !e.denialHolds(limit) {
		e.denyUntil.Store(0)
	}
	l.lockGather(e)
	lowered := e.partOf(limit).Burst < partLimit(e).Burst
	e.limit.Store(l.limits.get(limit))
	if lowered {
		if n := e.ledger.Withdraw(&e.avail, e.avail.Load()); n > 0 {
			e.ledger.Issued += n // spent by no one: granted all the same
			l.stats.dropped.Add(uint64(n))
		}
	}
	l.scatterUnlock(e)
}

// newEntry returns the entry named name of part j of key in layout at.
func (l *Limiter) newEntry(name, key string, limit hybridlimit.Limit, now time.Time, j int, at layout) *entry {
	e := &entry{
		key:    name,
		owner:  key,
		group:  int32(l.partGroup(key, j, at.shards)),
		epoch:  l.seq.Add(1),
		ledger: account.Ledger{Use: account.Usage{LastAt: l.nanos(now), UsedAt: l.nanos(now)}},
	}
	e.placeAt(j, at)
	e.limit.Store(l.limits.get(limit))
	e.heardAt.Store(l.nanos(now))
	e.remaining.Store(limit.Burst)
	e.left.Store(partLimit(e).Burst)
	return e
}

// tableOf returns the table that holds e.
func (l *Limiter) tableOf(e *entry) *table {
	if e.key != e.owner {
		return l.parts
	}
	return l.table
}

// each calls f for every tracked entry.
func (l *Limiter) each(f func(*entry)) {
	l.table.each(f)
	l.parts.each(f)
}

// degraded decides by the failure policy for key, whose home entry is e
// (nil when the table is full).
func (l *Limiter) degraded(e *entry, now time.Time, key string, limit hybridlimit.Limit, cost int64) hybridlimit.Result {
	switch l.cfg.policy {
	case hybridlimit.FailOpen:
		l.stats.failOpen.Add(1)
		return hybridlimit.Result{Limit: limit, Allowed: true, Source: hybridlimit.SourceFallback}
	case hybridlimit.FailClosed:
		l.stats.failClosed.Add(1)
		r := denied(limit, l.cfg.interval, hybridlimit.SourceFallback)
		r.FailedClosed = true
		return r
	}
	share := l.share(limit)
	var r hybridlimit.Result
	var err error
	switch {
	case cost > share.Burst:
		l.stats.fallbackDenied.Add(1)
		return denied(limit, share.Refill(), hybridlimit.SourceFallback)
	case e == nil:
		// No entry to remember the cost by: a bucket of the share keyed by
		// the key, which no round reports to Redis.
		r, err = l.fallback.AllowN(key, now, share, cost)
	default:
		r, err = l.spendShare(e, share, now, cost)
		if err == nil && r.Allowed {
			// What the share admitted goes to Redis with e's next round
			// its node answers, though no decision asks for one.
			l.flag(e, 0, false)
		}
	}
	if err != nil {
		l.stats.fallbackDenied.Add(1)
		return denied(limit, l.cfg.interval, hybridlimit.SourceFallback)
	}
	if r.Allowed {
		l.stats.fallbackAllowed.Add(1)
	} else {
		l.stats.fallbackDenied.Add(1)
	}
	r.Limit, r.Source = limit, hybridlimit.SourceFallback
	return r
}

// share returns this instance's share of limit when it must decide alone,
// the burst divided, rounded up, and the rate spread over the live
// instances: divided when it divides evenly, else by stretching the period
// (so 5 per second among 10 instances is 5 per 10 seconds each, not 0),
// else, when that period is longer than a limit may have, divided and
// rounded down (1000 per 200 days among 3 is 333 per 200 days each). When
// the burst rounded up would take longer than a limit may to refill, it is
// rounded down instead (4 a week, burst 209, among 2: burst 104).
func (l *Limiter) share(limit hybridlimit.Limit) hybridlimit.Limit {
	n := max(l.live.Load(), 1)
	for _, burst := range []int64{(limit.Burst + n - 1) / n, max(limit.Burst/n, 1)} {
		if limit.Rate%n == 0 {
			if s := (hybridlimit.Limit{Rate: limit.Rate / n, Period: limit.Period, Burst: burst}); s.Validate() == nil {
				return s
			}
		}
		s := hybridlimit.Limit{Rate: limit.Rate, Period: limit.Period * time.Duration(n), Burst: burst}
		if s.Period/time.Duration(n) == limit.Period && s.Validate() == nil {
			return s
		}
		s = hybridlimit.Limit{Rate: limit.Rate / n, Period: limit.Period, Burst: burst}
		if s.Rate >= 1 && s.Validate() == nil {
			return s
		}
	}
	// Less than a token a year each: one token a year it is.
	return hybridlimit.Limit{Rate: 1, Period: hybridlimit.MaxRefill, Burst: 1}
}
