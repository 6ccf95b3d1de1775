package sync

import (
	stdsync "sync"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/sync/internal/account"
)

// owing holds what the entries that owe Redis anything (e.owes) owe it
// (account.Owing): what the failure policy admitted and charges beyond the
// allowance. Entries that owe nothing have no record, so the state costs
// nothing while Redis answers.
type owing struct {
	mu stdsync.Mutex
	of map[*entry]*account.Owing
}

// get returns what e owes, or nil. The caller holds e.mu.
func (ds *owing) get(e *entry) *account.Owing {
	if !e.owes {
		return nil
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.of[e]
}

// open returns what e owes, making the record. The caller holds e.mu.
func (ds *owing) open(e *entry) *account.Owing {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.of[e]
	if d == nil {
		if ds.of == nil {
			ds.of = make(map[*entry]*account.Owing)
		}
		d = &account.Owing{}
		ds.of[e] = d
		e.owes = true
	}
	return d
}

// remove removes e's record and returns what it owed and since when. The
// caller holds e.mu.
func (ds *owing) remove(e *entry) (owed, since int64) {
	if !e.owes {
		return 0, 0
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.of[e]
	delete(ds.of, e)
	e.owes = false
	return d.Owed, d.Since
}

// add makes e owe owed more, admitted since since (counted in e.ledger.Issued
// by the caller). The caller holds e.mu.
func (ds *owing) add(e *entry, owed, since int64) {
	if owed == 0 {
		return
	}
	ds.open(e).Add(owed, since)
}

// answered records that Redis answered e's message m, prepared at sentAt:
// the share bucket is done with (a later outage starts from this reply),
// and if Redis applied the message (applied), what it carried is taken.
// The caller holds e.mu.
func (ds *owing) answered(e *entry, m *message, applied bool, sentAt int64) {
	if !e.owes {
		return
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.of[e]
	d.Answered(m.wire.Owed, applied, sentAt)
	if d.Owed == 0 {
		delete(ds.of, e)
		e.owes = false
	}
}

// owed returns what e owes. The caller holds e.mu.
func (ds *owing) owed(e *entry) int64 {
	if d := ds.get(e); d != nil {
		return d.Owed
	}
	return 0
}

// total returns what all entries owe.
func (ds *owing) total() int64 {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var sum int64
	for _, d := range ds.of {
		sum += d.Owed
	}
	return sum
}

// spendShare takes cost from this instance's share of e's key while the
// failure policy decides for it. The share starts from what the instance
// knows of the key's bucket, not full: its part of the tokens Redis last
// said were left (or of the overdraft), refilling at the share's rate since.
// A key at its limit stays at it. What it admits e owes: the next message
// has Redis take it (Reserve) or reports it (Optimistic).
func (l *Limiter) spendShare(e *entry, share hybridlimit.Limit, now time.Time, cost int64) (hybridlimit.Result, error) {
	l.lockGather(e)
	defer l.scatterUnlock(e)
	t := l.nanos(now)
	d := l.owing.open(e)
	if d.Share == nil || d.Share.Limit() != share {
		c, err := account.SeedShare(d.Share, share, t, l.heard(e))
		if err != nil {
			return hybridlimit.Result{}, err
		}
		d.Share = &c
	}
	r, err := d.Share.Take(t, cost)
	if err == nil && r.Allowed {
		e.ledger.Issued += cost
		l.owing.add(e, cost, t)
	}
	return r, err
}

// heard returns what Redis last said of e's key, from which a share
// bucket starts (account.SeedShare). The caller holds e.mu.
func (l *Limiter) heard(e *entry) account.Heard {
	return account.Heard{
		Synced:     e.isSynced(),
		At:         e.heardAt.Load(),
		Remaining:  e.remaining.Load(),
		ResetAfter: e.resetAfter.Load(),
		Whole:      e.whole(),
		Limit:      *e.limit.Load(),
		Live:       max(l.live.Load(), 1),
	}
}
