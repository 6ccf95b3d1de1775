package sync

import (
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// policy is the lease policy: how much a key holds ahead of demand, when
// it tops up and hands back, and when it is next looked at. Its methods
// are functions of the configuration and of a holding, a snapshot of one
// key on this instance: no Redis, no locks, no clock.
type policy struct {
	interval   time.Duration // the sync interval
	jitter     float64       // fraction by which each key's next sync varies
	lookahead  float64       // intervals of demand a lease holds
	stretchCap float64       // most times its lease a key may hold (a power of two)
	lowLimit   float64       // tokens per instance per interval below which nothing is leased
	optimistic bool          // the mode spends first and reports (Optimistic)
}

// holding is what the policy knows of one key's part on this instance at
// one time.
type holding struct {
	limit   hybridlimit.Limit // the part's
	shards  int               // parts of the key (1 if whole)
	live    int64             // instances alive, at least 1
	demand  float64           // tokens a second spent here, smoothed (see usage)
	held    int64             // allowance unspent
	left    int64             // tokens in the part's bucket at the last sync
	unused  time.Duration     // since consumption was last seen
	serving bool              // spends ahead of demand: see Limiter.serving
}

// Lease sizing.
const (
	// maxMinLease is the most a key holds for the mere fact of being in
	// use, whatever its measured demand.
	maxMinLease = 8
	// idleHoldIntervals and minIdleHold set how long a key without
	// consumption keeps its lease before handing it back (see idleHold).
	idleHoldIntervals = 40
	minIdleHold       = 10 * time.Second
	// maxQuiet is the most sync intervals a Reserve key with nothing to
	// say goes without a look (see quiet); the timing wheel spans 16.
	maxQuiet = 8
)

// tick is the loop's period: a quarter of the sync interval.
func (p policy) tick() time.Duration { return max(p.interval/4, time.Millisecond) }

// idleHold is how long a key keeps its minimum lease without consumption:
// 40 sync intervals, at least 10 seconds, so a quiet key pays one fetch per
// burst of use rather than one per request; twice as long evicts it from
// memory. The minimum leases of all instances hold at most a quarter of a
// key's burst, which bounds what idle instances keep from busy ones.
func (p policy) idleHold() time.Duration {
	return max(idleHoldIntervals*p.interval, minIdleHold)
}

// lease returns what h holds ahead of demand in Reserve mode: its demand
// over the lookahead, stretched while its bucket has room (stretch), at
// least the minimum lease; nothing for a key idle past the idle hold,
// under the low-limit rule, or a part that is not serving.
func (p policy) lease(h holding) int64 {
	if !h.serving || h.unused >= p.idleHold() || p.isLowLimit(h.limit, h.shards, h.live) {
		return 0
	}
	lease := h.demand * p.lookahead * p.interval.Seconds()
	return max(int64(math.Ceil(lease*p.stretch(h, lease))), p.minLease(h.limit, h.live))
}

// want is what a Reserve key should hold: what decisions wait for plus
// its lease, at most the burst.
func (p policy) want(h holding, waiting int64) int64 {
	return min(waiting+p.lease(h), h.limit.Burst)
}

// topUp decides a Reserve key's holding against want: it hands back the
// excess of a key holding more than twice what it wants (or anything,
// wanting nothing), and asks for more, up to want, for a key that decisions
// wait on or that has fallen under its low mark.
func (p policy) topUp(h holding, waiting, want int64) (excess, more int64) {
	switch {
	case h.held > 2*want || (want == 0 && h.held > 0):
		return h.held - want, 0
	case (waiting > 0 || float64(h.held) < p.lowMark(h, want)) && h.held < want:
		return 0, want - h.held
	}
	return 0, 0
}

// lowMark is what a key holds when it tops up to want: half of it, or an
// interval and a half of demand if that is more. Topping up only then, not
// for every token spent, is what lets a slow key holding its minimum lease
// sync every few seconds rather than every interval.
func (p policy) lowMark(h holding, want int64) float64 {
	return max(float64(want/2), h.demand*1.5*p.interval.Seconds())
}

// stretch returns how many times lease h may hold: the largest power of
// two, up to the cap, for which every live instance holding that many
// leases would take at most an eighth of what the bucket held at its last
// sync. A key far under its limit then tops up every few seconds rather
// than every interval, which is most of what a round of an instance with
// many such keys costs; as the bucket drains the factor falls back to 1,
// and what a key holds beyond twice its lease goes back at its next sync.
func (p policy) stretch(h holding, lease float64) float64 {
	room := float64(h.left) / 8
	all := lease * float64(h.live)
	s := 1.0
	for 2*s <= p.stretchCap && 2*s*all <= room {
		s *= 2
	}
	return s
}

// minLease returns what a key in use holds at least: maxMinLease tokens,
// or a quarter of this instance's share of the burst if that is less, so
// the minimum leases of all instances together hold at most a quarter of
// the burst.
func (p policy) minLease(limit hybridlimit.Limit, live int64) int64 {
	return min(maxMinLease, limit.Burst/(4*live))
}

// isLowLimit reports whether limit, a part's of a key split in shards,
// is too low to lease ahead of demand with live instances: fewer than the
// low-limit threshold of tokens per instance per interval. The parts of a
// split key each serve the instances whose home they are, about
// live/shards of them, so a split leaves the rule where it was for the key.
func (p policy) isLowLimit(limit hybridlimit.Limit, shards int, live int64) bool {
	// Not rounded: with fewer instances than parts, a whole one per part
	// made a split key exact where the whole key leased.
	users := float64(max(live, 1)) / float64(max(shards, 1))
	return limit.TokensIn(p.interval)/users < p.lowLimit
}

// next returns the time until h's next sync: the sync interval, jittered
// by seed, or sooner when the allowance will run out before then or the
// bucket is nearly empty. In Reserve mode a key whose bucket cannot feed
// it (it held less than an interval of this instance's demand, or
// nothing) is rationed: asking sooner only spreads what refills thinner
// over the instances, for more messages. Optimistic spends first, and
// asking sooner is what bounds its overshoot.
func (p policy) next(h holding, seed uint64) time.Duration {
	d := p.interval
	held := float64(max(h.held, 0))
	if h.demand > 0 && (p.optimistic || float64(h.left) >= h.demand*p.interval.Seconds()) {
		if runOut := time.Duration(held / h.demand * float64(time.Second)); runOut < d {
			d = max(runOut/2, p.tick())
		}
	}
	if h.left < h.limit.Burst/10 && (p.optimistic || h.left > 0) && h.demand > 0 {
		d = max(min(d, p.interval/2), p.tick())
	}
	return time.Duration(float64(d) * p.jitterOf(seed))
}

// quiet returns when to look again at h, which holds allowance and had
// nothing to say: in Reserve mode, while its bucket is not low, a quarter
// of the time its demand takes to bring it down to its low mark (for a key
// unused for two intervals, its idle hold's end), if that is at least two
// intervals, up to maxQuiet intervals; else next. An instance with many
// quiet keys then looks at few of them a round (BenchmarkLimiterSteady);
// a key whose demand jumps meanwhile fetches when its allowance runs out,
// as any key does.
func (p policy) quiet(h holding, seed uint64) time.Duration {
	d := p.next(h, seed)
	if p.optimistic || h.left < h.limit.Burst/10 {
		return d
	}
	var q time.Duration
	switch {
	case h.demand > 0:
		left := float64(h.held) - p.lowMark(h, min(p.lease(h), h.limit.Burst))
		q = time.Duration(left / h.demand / 4 * float64(time.Second))
	case h.unused >= 2*p.interval:
		// Unused for a while: the next thing to do is to hand its lease
		// back when the idle hold ends. (A key just fetched has no
		// demand measured yet, and is not quiet.)
		q = p.idleHold() - h.unused
	}
	if q < 2*p.interval {
		return d
	}
	return max(d, min(q, maxQuiet*p.interval))
}

// jitterOf returns a factor in [1-j, 1+j] for the configured jitter j,
// drawn from seed by a SplitMix64 step: deterministic for a deterministic
// clock, so a simulation in virtual time replays exactly.
func (p policy) jitterOf(seed uint64) float64 {
	x := seed + 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	u := float64(x>>11) / (1 << 53)
	return 1 + p.jitter*(2*u-1)
}

// usage estimates a key's consumption rate on this instance from the
// consumption each round sees.
type usage struct {
	rate     float64 // tokens a second, smoothed
	lastUsed int64   // consumption when rate was last measured
	lastAt   int64   // when, ns of the limiter's clock, as are the times below
	usedAt   int64   // when a round last saw consumption (or the entry's start)
}

// observe measures the rate at t, consumed tokens having been admitted in
// all. Demand is measured over the time since consumption was last seen,
// not since the last round (one request on a quiet key is not a burst of
// demand), and over half an interval at least. It rises at once and
// decays by halves, a measurement every half interval at most; between,
// a key fetching again may only raise it.
func (u *usage) observe(consumed, t int64, interval time.Duration) {
	dt := time.Duration(t - u.lastAt)
	used := float64(max(consumed-u.lastUsed, 0))
	window := max(dt, time.Duration(t-u.usedAt), interval/2).Seconds()
	switch {
	case dt >= interval/2:
		rate := used / window
		u.rate = max(rate, (u.rate+rate)/2)
		if consumed != u.lastUsed {
			u.usedAt = t
		}
		u.lastUsed, u.lastAt = consumed, t
	case dt >= time.Millisecond && used/window > u.rate:
		// A key fetching again before half an interval is out: let its
		// lease grow now rather than after a string of small fetches. Over
		// half an interval: a token spent in a key's first milliseconds is
		// not a burst that should lease the whole bucket away from the
		// other instances.
		u.rate = used / window
	}
}
