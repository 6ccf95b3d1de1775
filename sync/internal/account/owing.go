package account

import (
	"math"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
)

// Owing is what one key owes Redis: the cost the failure policy admitted,
// or a charge beyond the allowance (counted in what the key was issued),
// that Redis has not acknowledged taking from the bucket (Reserve) or
// being told of (Optimistic), when the first of it was, and the
// instance's share bucket that admitted it while the policy decides.
type Owing struct {
	Owed, Since int64       // cost; ns of the limiter's clock
	Share       *local.Core // on the limiter's ns axis; nil once Redis has answered again
}

// Add makes d owe owed more, admitted at since.
func (d *Owing) Add(owed, since int64) {
	if owed == 0 {
		return
	}
	if d.Owed == 0 || since < d.Since {
		d.Since = since
	}
	d.Owed += owed
}

// Answered records that Redis answered a message that carried carried of
// what is owed, prepared at sentAt: the share bucket is done with (a later
// outage starts from this reply), and if Redis applied the message
// (applied), what it carried is taken and what is left was admitted after
// the message.
func (d *Owing) Answered(carried int64, applied bool, sentAt int64) {
	d.Share = nil
	if applied {
		d.Owed -= carried
		d.Since = sentAt
	}
}

// Heard is what Redis last said of a key, as a share bucket starts from
// it.
type Heard struct {
	Synced     bool              // Redis has answered for the key at least once
	At         int64             // when it last did, ns of the limiter's clock
	Remaining  int64             // tokens its bucket held then, summed over a split key's parts
	ResetAfter int64             // ns until the bucket was full, as of then
	Whole      bool              // the key is not split
	Limit      hybridlimit.Limit // the key's
	Live       int64             // instances alive, at least 1
}

// SeedShare returns the share bucket of a key at time t (ns of the
// limiter's clock): when the share changes (the live count did), holding
// what the old share, old, holds now; for a key Redis has not answered
// for, full; else holding, at the last reply, the share of what the key's
// bucket then held. A key at its limit stays at it: a bucket empty or
// overdrawn leaves the share empty until its part of the overdraft has
// refilled.
func SeedShare(old *local.Core, share hybridlimit.Limit, t int64, h Heard) (local.Core, error) {
	c, err := local.NewCore(share, t)
	if err != nil {
		return c, err
	}
	switch {
	case old != nil:
		r, _ := old.Peek(t, 1)
		c.Set(t, r.Remaining)
	case h.Synced:
		n := max(h.Live, 1)
		level := float64(h.Remaining)
		if level == 0 && h.Whole {
			// Empty or overdrawn: the level the time until full implies.
			level = min(float64(h.Limit.Burst)-float64(h.ResetAfter)/float64(h.Limit.Period)*float64(h.Limit.Rate), 0)
		}
		if level >= 0 {
			c.Set(h.At, int64(level)/n)
		} else {
			tokenNs := float64(share.Period) / float64(share.Rate)
			c.Set(h.At+int64(math.Ceil(-level/float64(n)*tokenNs)), 0)
		}
	}
	return c, nil
}
