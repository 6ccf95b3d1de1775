package account

import (
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// Policy is the lease policy: how much a key holds ahead of demand, when
// it tops up and hands back, and when it is next looked at. Its methods
// are functions of the configuration and of a holding, a snapshot of one
// key on this instance: no Redis, no locks, no clock.
type Policy struct {
	Interval   time.Duration // the sync interval
	Jitter     float64       // fraction by which each key's next sync varies
	Lookahead  float64       // intervals of demand a lease holds
	StretchCap float64       // most times its lease a key may hold (a power of two)
	LowLimit   float64       // tokens per instance per interval below which nothing is leased
	Optimistic bool          // the mode spends first and reports (Optimistic)
}

// Holding is what the policy knows of one key's part on this instance at
// one time.
type Holding struct {
	Limit   hybridlimit.Limit // the part's
	Key     hybridlimit.Limit // the key's, whole, whether or not it is split
	Live    int64             // instances alive, at least 1
	Demand  float64           // tokens a second spent here, smoothed (see Usage)
	Held    int64             // allowance unspent
	Left    int64             // tokens in the part's bucket at the last sync
	Unused  time.Duration     // since consumption was last seen
	Full    bool              // the part's bucket holds its burst by Redis's last word and the refill since
	Serving bool              // spends ahead of demand: a whole key, a split key's home, or the part home turned to
}

// Lease sizing.
const (
	// maxMinLease is the most a key holds for the mere fact of being in
	// use, whatever its measured demand.
	maxMinLease = 8
	// idleHoldIntervals and minIdleHold set how long a key without
	// consumption keeps its lease before handing it back (see IdleHold).
	idleHoldIntervals = 40
	minIdleHold       = 10 * time.Second
	// maxQuiet is the most sync intervals a Reserve key with nothing to
	// say goes without a look (see Quiet); the timing wheel spans 16.
	maxQuiet = 8
)

// Tick is the loop's period: a quarter of the sync interval.
func (p Policy) Tick() time.Duration { return max(p.Interval/4, time.Millisecond) }

// IdleHold is how long a key keeps its minimum lease without consumption:
// 40 sync intervals, at least 10 seconds, so a quiet key pays one fetch per
// burst of use rather than one per request; twice as long evicts it from
// memory. The minimum leases of all instances hold at most a quarter of a
// key's burst, which bounds what idle instances keep from busy ones.
func (p Policy) IdleHold() time.Duration {
	return max(idleHoldIntervals*p.Interval, minIdleHold)
}

// LetsGo reports whether a Reserve key idle past the idle hold lets what
// it holds go, spent by no one, rather than hand it back: its bucket is
// full by Redis's last word and the refill since, so a hand-back would be
// cut at the burst and change nothing, but for tokens other instances
// took since (it gives them at most what it holds, a lease), while the
// message that says so costs Redis what a fetch does.
// On a long tail of keys, each seen by an instance about once an idle
// hold, handing leases back would cost up to two messages a decision
// where the exact limiter sends one.
func (p Policy) LetsGo(h Holding) bool { return h.Full && h.Unused >= p.IdleHold() }

// Full reports whether a bucket of limit that held left tokens since ns
// ago holds its burst now.
func Full(limit hybridlimit.Limit, left, since int64) bool {
	return float64(left)+limit.TokensIn(time.Duration(since)) >= float64(limit.Burst)
}

// Lease returns what h holds ahead of demand in Reserve mode: its demand
// over the lookahead, stretched while its bucket has room (stretch), at
// least the minimum lease; nothing for a key idle past the idle hold,
// under the low-limit rule, or a part that is not serving.
func (p Policy) Lease(h Holding) int64 {
	if !h.Serving || h.Unused >= p.IdleHold() || p.IsLowLimit(h.Key, h.Live) {
		return 0
	}
	lease := h.Demand * p.Lookahead * p.Interval.Seconds()
	return max(int64(math.Ceil(lease*p.Stretch(h, lease))), p.MinLease(h.Limit, h.Live))
}

// Want is what a Reserve key should hold: what decisions wait for plus
// its lease, at most the burst.
func (p Policy) Want(h Holding, waiting int64) int64 {
	return min(waiting+p.Lease(h), h.Limit.Burst)
}

// TopUp decides a Reserve key's holding against want: it hands back the
// excess of a key holding more than twice what it wants (or anything,
// wanting nothing), and asks for more, up to want, for a key that decisions
// wait on or that has fallen under its low mark.
func (p Policy) TopUp(h Holding, waiting, want int64) (excess, more int64) {
	switch {
	case h.Held > 2*want || (want == 0 && h.Held > 0):
		return h.Held - want, 0
	case (waiting > 0 || float64(h.Held) < p.LowMark(h, want)) && h.Held < want:
		return 0, want - h.Held
	}
	return 0, 0
}

// LowMark is what a key holds when it tops up to want: half of it, or an
// interval and a half of demand if that is more. Topping up only then, not
// for every token spent, is what lets a slow key holding its minimum lease
// sync every few seconds rather than every interval.
func (p Policy) LowMark(h Holding, want int64) float64 {
	return max(float64(want/2), h.Demand*1.5*p.Interval.Seconds())
}

// RideBelow returns the holding under which the decision that takes a
// Reserve key there puts it on the riders, the keys the next call to
// their node carries: half its low mark, for a key that leases and whose
// bucket can feed it (feeds), else 0 (no decision does). A key's visits
// come an interval apart, and a top-up only at a visit that finds it under
// its low mark: a key seen a few times an interval holds a few tokens,
// and arrivals that come close together spend them before the visit, and
// the next decision waits for a fetch (docs/design.md 6.5, riders). Half
// the low mark, not all of it, so that a rider's top-up brings about as
// much as a visit's: a rider at the low mark itself brings less, and a key
// seen a few times an interval sends more messages for the same tokens.
func (p Policy) RideBelow(h Holding) int64 {
	lease := p.Lease(h)
	if p.Optimistic || lease == 0 || !p.feeds(h) {
		return 0
	}
	return int64(math.Ceil(p.LowMark(h, min(lease, h.Limit.Burst)) / 2))
}

// feeds reports whether h's bucket held at its last sync at least an
// interval of this instance's demand: whether asking sooner brings a
// Reserve key more, rather than spread what refills thinner.
func (p Policy) feeds(h Holding) bool {
	return h.Demand > 0 && float64(h.Left) >= h.Demand*p.Interval.Seconds()
}

// Stretch returns how many times lease h may hold: the largest power of
// two, up to the cap, for which every live instance holding that many
// leases would take at most an eighth of what the bucket held at its last
// sync. A key far under its limit then tops up every few seconds rather
// than every interval, which is most of what a round of an instance with
// many such keys costs; as the bucket drains the factor falls back to 1,
// and what a key holds beyond twice its lease goes back at its next sync.
func (p Policy) Stretch(h Holding, lease float64) float64 {
	room := float64(h.Left) / 8
	all := lease * float64(h.Live)
	s := 1.0
	for 2*s <= p.StretchCap && 2*s*all <= room {
		s *= 2
	}
	return s
}

// MinLease returns what a key in use holds at least: maxMinLease tokens,
// or a quarter of this instance's share of the burst if that is less, so
// the minimum leases of all instances together hold at most a quarter of
// the burst.
func (p Policy) MinLease(limit hybridlimit.Limit, live int64) int64 {
	return min(maxMinLease, limit.Burst/(4*live))
}

// IsLowLimit reports whether key, a key's limit, is too low to lease ahead
// of demand with live instances: fewer than the low-limit threshold of
// tokens per instance per interval. A split key is judged whole: each of
// its S parts holds a 1/S of the rate for the instances whose home it is,
// about live/S of them, so a split leaves the rule where it was. Judged on
// a part's rate, rounded to whole tokens (266 of 800 split 3 ways), a key
// at the threshold whole fell under it split, and was decided per request.
func (p Policy) IsLowLimit(key hybridlimit.Limit, live int64) bool {
	return key.TokensIn(p.Interval)/float64(max(live, 1)) < p.LowLimit
}

// Next returns the time until h's next sync: the sync interval, jittered
// by seed, or sooner when the allowance will run out before then or the
// bucket is nearly empty. In Reserve mode a key whose bucket cannot feed
// it (it held less than an interval of this instance's demand, or
// nothing) is rationed: asking sooner only spreads what refills thinner
// over the instances, for more messages. Optimistic spends first, and
// asking sooner is what bounds its overshoot.
func (p Policy) Next(h Holding, seed uint64) time.Duration {
	d := p.Interval
	held := float64(max(h.Held, 0))
	if h.Demand > 0 && (p.Optimistic || p.feeds(h)) {
		if runOut := time.Duration(held / h.Demand * float64(time.Second)); runOut < d {
			d = max(runOut/2, p.Tick())
		}
	}
	if h.Left < h.Limit.Burst/10 && (p.Optimistic || h.Left > 0) && h.Demand > 0 {
		d = max(min(d, p.Interval/2), p.Tick())
	}
	return time.Duration(float64(d) * p.JitterOf(seed))
}

// Quiet returns when to look again at h, which holds allowance and had
// nothing to say: in Reserve mode, while its bucket is not low, a quarter
// of the time its demand takes to bring it down to its low mark (for a key
// unused for two intervals, its idle hold's end), if that is at least two
// intervals, up to maxQuiet intervals; else next. An instance with many
// quiet keys then looks at few of them a round (BenchmarkLimiterSteady);
// a key whose demand jumps meanwhile fetches when its allowance runs out,
// as any key does.
func (p Policy) Quiet(h Holding, seed uint64) time.Duration {
	d := p.Next(h, seed)
	if p.Optimistic || h.Left < h.Limit.Burst/10 {
		return d
	}
	var q time.Duration
	switch {
	case h.Demand > 0:
		left := float64(h.Held) - p.LowMark(h, min(p.Lease(h), h.Limit.Burst))
		q = time.Duration(left / h.Demand / 4 * float64(time.Second))
	case h.Unused >= 2*p.Interval:
		// Unused for a while: the next thing to do is to hand its lease
		// back when the idle hold ends. (A key just fetched has no
		// demand measured yet, and is not quiet.)
		q = p.IdleHold() - h.Unused
	}
	if q < 2*p.Interval {
		return d
	}
	return max(d, min(q, maxQuiet*p.Interval))
}

// JitterOf returns a factor in [1-j, 1+j] for the configured jitter j,
// drawn from seed by a SplitMix64 step: deterministic for a deterministic
// clock, so a simulation in virtual time replays exactly.
func (p Policy) JitterOf(seed uint64) float64 {
	x := seed + 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	u := float64(x>>11) / (1 << 53)
	return 1 + p.Jitter*(2*u-1)
}

// Usage estimates a key's consumption rate on this instance from the
// consumption each round sees.
type Usage struct {
	Rate     float64 // tokens a second, smoothed
	LastUsed int64   // consumption when rate was last measured
	LastAt   int64   // when, ns of the limiter's clock, as are the times below
	UsedAt   int64   // when a round last saw consumption (or the entry's start)
}

// Observe measures the rate at t, consumed tokens having been admitted in
// all. Demand is measured over the time since consumption was last seen,
// not since the last round (one request on a quiet key is not a burst of
// demand), and over half an interval at least. It rises at once and
// decays by halves, a measurement every half interval at most; between,
// a key fetching again may only raise it.
func (u *Usage) Observe(consumed, t int64, interval time.Duration) {
	dt := time.Duration(t - u.LastAt)
	used := float64(max(consumed-u.LastUsed, 0))
	window := max(dt, time.Duration(t-u.UsedAt), interval/2).Seconds()
	switch {
	case dt >= interval/2:
		rate := used / window
		u.Rate = max(rate, (u.Rate+rate)/2)
		if consumed != u.LastUsed {
			u.UsedAt = t
		}
		u.LastUsed, u.LastAt = consumed, t
	case dt >= time.Millisecond && used/window > u.Rate:
		// A key fetching again before half an interval is out: let its
		// lease grow now rather than after a string of small fetches. Over
		// half an interval: a token spent in a key's first milliseconds is
		// not a burst that should lease the whole bucket away from the
		// other instances.
		u.Rate = used / window
	}
}
