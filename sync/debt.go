package sync

import (
	"math"
	stdsync "sync"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
)

// debt is what one entry owes Redis while and after the failure policy
// decides for its key: the cost the policy admitted (counted in the
// entry's issued) that Redis has not acknowledged taking from the bucket
// (Reserve) or being told of (Optimistic), when the first of it was, and
// the instance's share bucket that admitted it. Entries that owe nothing
// have none, so the state costs nothing while Redis answers.
type debt struct {
	owed, since int64       // cost; ns of the limiter's clock
	share       *local.Core // on the limiter's ns axis; nil once Redis has answered again
}

// debts holds the debts of the entries that have one (e.owes).
type debts struct {
	mu stdsync.Mutex
	of map[*entry]*debt
}

// get returns e's debt, or nil. The caller holds e.mu.
func (ds *debts) get(e *entry) *debt {
	if !e.owes {
		return nil
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.of[e]
}

// open returns e's debt, making it. The caller holds e.mu.
func (ds *debts) open(e *entry) *debt {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.of[e]
	if d == nil {
		if ds.of == nil {
			ds.of = make(map[*entry]*debt)
		}
		d = &debt{}
		ds.of[e] = d
		e.owes = true
	}
	return d
}

// take removes e's debt and returns what it owed and since when. The
// caller holds e.mu.
func (ds *debts) take(e *entry) (owed, since int64) {
	if !e.owes {
		return 0, 0
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.of[e]
	delete(ds.of, e)
	e.owes = false
	return d.owed, d.since
}

// add makes e owe owed more, admitted since since (counted in e.issued
// by the caller). The caller holds e.mu.
func (ds *debts) add(e *entry, owed, since int64) {
	if owed == 0 {
		return
	}
	d := ds.open(e)
	if d.owed == 0 || since < d.since {
		d.since = since
	}
	d.owed += owed
}

// answered records that Redis answered e's message m, prepared at sentAt:
// the share bucket is done with (a later outage starts from this reply),
// and if Redis applied the message (applied), what it carried is taken.
// The caller holds e.mu.
func (ds *debts) answered(e *entry, m *message, applied bool, sentAt int64) {
	if !e.owes {
		return
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.of[e]
	d.share = nil
	if applied {
		// What is left was admitted after the message.
		d.owed -= m.wire.Owed
		d.since = sentAt
	}
	if d.owed == 0 {
		delete(ds.of, e)
		e.owes = false
	}
}

// owed returns what e owes. The caller holds e.mu.
func (ds *debts) owed(e *entry) int64 {
	if d := ds.get(e); d != nil {
		return d.owed
	}
	return 0
}

// total returns what all entries owe.
func (ds *debts) total() int64 {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var sum int64
	for _, d := range ds.of {
		sum += d.owed
	}
	return sum
}

// spendShare takes cost from this instance's share of e's key while the
// failure policy decides for it. The share starts from what the instance
// knows of the key's bucket, not full: its part of the tokens Redis last
// said were left (or of the debt), refilling at the share's rate since.
// A key at its limit stays at it. What it admits e owes: the next message
// has Redis take it (Reserve) or reports it (Optimistic).
func (l *Limiter) spendShare(e *entry, share hybridlimit.Limit, now time.Time, cost int64) (hybridlimit.Result, error) {
	l.lockGather(e)
	defer l.scatterUnlock(e)
	t := l.nanos(now)
	d := l.debts.open(e)
	if d.share == nil || d.share.Limit() != share {
		c, err := l.seedShare(e, d.share, share, t)
		if err != nil {
			return hybridlimit.Result{}, err
		}
		d.share = &c
	}
	r, err := d.share.Take(t, cost)
	if err == nil && r.Allowed {
		e.issued += cost
		l.debts.add(e, cost, t)
	}
	return r, err
}

// seedShare returns e's share bucket at time t (ns of the limiter's
// clock): when the share changes (the live count did), holding what the
// old share, old, holds now; for a key Redis has not answered for, full;
// else holding, at the last reply, the share of what the key's bucket then
// held. The caller holds e.mu.
func (l *Limiter) seedShare(e *entry, old *local.Core, share hybridlimit.Limit, t int64) (local.Core, error) {
	c, err := local.NewCore(share, t)
	if err != nil {
		return c, err
	}
	switch {
	case old != nil:
		r, _ := old.Peek(t, 1)
		c.Set(t, r.Remaining)
	case e.synced.Load():
		n := max(l.live.Load(), 1)
		heard := e.heardAt.Load()
		level := float64(e.remaining.Load())
		if level == 0 && e.shards == 1 {
			// Empty or in debt: the level the time until full implies.
			limit := *e.limit.Load()
			level = min(float64(limit.Burst)-float64(e.resetAfter.Load())/float64(limit.Period)*float64(limit.Rate), 0)
		}
		if level >= 0 {
			c.Set(heard, int64(level)/n)
		} else {
			// The share is empty until its part of the debt has refilled.
			tokenNs := float64(share.Period) / float64(share.Rate)
			c.Set(heard+int64(math.Ceil(-level/float64(n)*tokenNs)), 0)
		}
	}
	return c, nil
}
