package global

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// The models below state each algorithm from its definition, in exact
// rational arithmetic, and find retry and reset times by searching for the
// first microsecond at which a condition holds, rather than by the closed
// forms the scripts use. TestScriptsMatchModels plays random sequences on
// both and requires identical Results.

// decision is a model's answer, in microseconds.
type decision struct {
	ok                bool
	rem, retry, reset int64
}

type model interface {
	decide(now, cost int64, peek bool) decision
	// refund gives back cost at now and reports how much it gave.
	refund(now, cost int64) int64
	// charge spends cost at now whatever the state holds, and answers as
	// a peek of cost 1 after it, landed: what is left, the wait for one
	// unit, the wait for the idle state.
	charge(now, cost int64) decision
}

// search returns the least x in [0, hi] with f(x), f monotone, or hi+1.
func search(hi int64, f func(x int64) bool) int64 {
	lo := int64(0)
	for lo <= hi {
		mid := lo + (hi-lo)/2
		if f(mid) {
			hi = mid - 1
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

// mulRat returns a*b/d exactly: the products of huge limits pass int64.
func mulRat(a, b, d int64) *big.Rat {
	return new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(a), big.NewInt(b)), big.NewInt(d))
}

func floorRat(r *big.Rat) int64 {
	q := new(big.Int).Quo(r.Num(), r.Denom()) // truncates toward zero
	if r.Sign() < 0 && !r.IsInt() {
		q.Sub(q, big.NewInt(1))
	}
	return q.Int64()
}

// bucketModel is a continuous token bucket (and so GCRA): tokens refill at
// rate/period per microsecond up to burst; a missing state is full.
type bucketModel struct {
	rate, period, burst int64
	tokens              *big.Rat
	ts                  int64
}

func (m *bucketModel) at(now int64) *big.Rat {
	if m.tokens == nil {
		return rat(m.burst)
	}
	t := new(big.Rat).Set(m.tokens)
	if now > m.ts {
		t.Add(t, mulRat(now-m.ts, m.rate, m.period))
	}
	if t.Cmp(rat(m.burst)) > 0 {
		t = rat(m.burst)
	}
	return t
}

func (m *bucketModel) decide(now, cost int64, peek bool) decision {
	tok := m.at(now)
	ok := tok.Cmp(rat(cost)) >= 0
	if ok && !peek {
		tok.Sub(tok, rat(cost))
		m.tokens, m.ts = tok, now
	}
	after := func(x int64) *big.Rat { // tokens x us later, nothing spent
		return (&bucketModel{rate: m.rate, period: m.period, burst: m.burst, tokens: tok, ts: now}).at(now + x)
	}
	// An upper bound on any wait, +1: the time to fill from what the
	// bucket holds, debt included.
	full := floorRat(new(big.Rat).Quo(new(big.Rat).Mul(new(big.Rat).Sub(rat(m.burst), tok), rat(m.period)), rat(m.rate)))
	d := decision{ok: ok, rem: max(floorRat(tok), 0)}
	if !ok {
		d.retry = search(full+1, func(x int64) bool { return after(x).Cmp(rat(cost)) >= 0 })
	}
	d.reset = search(full+1, func(x int64) bool { return after(x).Cmp(rat(m.burst)) == 0 })
	return d
}

// charge takes cost tokens whatever the bucket holds: below zero, it is in
// debt, which refill repays.
func (m *bucketModel) charge(now, cost int64) decision {
	tok := m.at(now)
	m.tokens, m.ts = tok.Sub(tok, rat(cost)), now
	d := m.decide(now, 1, true)
	d.ok = true
	return d
}

// refund gives back cost tokens, never beyond the burst: as many as the
// bucket is short of, in whole tokens rounded up, at most cost.
func (m *bucketModel) refund(now, cost int64) int64 {
	if m.tokens == nil {
		return 0 // never written: full
	}
	tok := m.at(now)
	short := new(big.Rat).Sub(rat(m.burst), tok)
	given := min(cost, floorRat(short))
	if !short.IsInt() {
		given = min(cost, floorRat(short)+1)
	}
	tok.Add(tok, rat(cost))
	if tok.Cmp(rat(m.burst)) > 0 {
		tok = rat(m.burst)
	}
	m.tokens, m.ts = tok, max(now, m.ts)
	return given
}

// admission is one admitted request of the window models; seq numbers
// the admissions of a key from 1, as the sliding log's members are.
type admission struct{ t, cost, seq int64 }

// windowModel holds the admissions; each algorithm sums them its own way.
type windowModel struct {
	period, quota int64
	log           []admission
	seq           int64
	// take gives back cost from the admissions the way the algorithm's
	// script does, and returns how much.
	take func(m *windowModel, now, cost int64) int64
	// used returns the cost counted against a request at now, as a
	// rational: the fixed window's count, the sliding window's estimate,
	// the log's sum.
	used func(m *windowModel, now int64) *big.Rat
}

func (m *windowModel) sum(from, to int64) int64 { // cost admitted in [from, to)
	var s int64
	for _, a := range m.log {
		if a.t >= from && a.t < to {
			s += a.cost
		}
	}
	return s
}

func windowStart(now, period int64) int64 { return now - now%period }

func fixedUsed(m *windowModel, now int64) *big.Rat {
	s := windowStart(now, m.period)
	return rat(m.sum(s, s+m.period))
}

func slidingUsed(m *windowModel, now int64) *big.Rat {
	s := windowStart(now, m.period)
	cur, prev := m.sum(s, s+m.period), m.sum(s-m.period, s)
	est := mulRat(prev, m.period-(now-s), m.period)
	return est.Add(est, rat(cur))
}

func logUsed(m *windowModel, now int64) *big.Rat {
	return rat(m.sum(now-m.period+1, now+1)) // (now - period, now]
}

func (m *windowModel) decide(now, cost int64, peek bool) decision {
	// Times only move forward: what is two periods old never counts again.
	m.log = slices.DeleteFunc(m.log, func(a admission) bool { return a.t < now-2*m.period })
	admits := func(at int64) bool {
		u := m.used(m, at)
		return u.Add(u, rat(cost)).Cmp(rat(m.quota)) <= 0
	}
	ok := admits(now)
	if ok && !peek {
		m.seq++
		m.log = append(m.log, admission{now, cost, m.seq})
	}
	u := m.used(m, now)
	rem := m.quota - floorRat(u)
	if !u.IsInt() {
		rem-- // the remaining cost must fit whole: quota - ceil(used)
	}
	d := decision{ok: ok, rem: max(rem, 0)}
	if !ok {
		d.retry = search(2*m.period, func(x int64) bool { return admits(now + x) })
	}
	d.reset = search(2*m.period, func(x int64) bool { return m.used(m, now+x).Sign() == 0 })
	if m.used(m, now).Sign() == 0 {
		d.reset = 0
	}
	return d
}

func (m *windowModel) refund(now, cost int64) int64 { return m.take(m, now, cost) }

// charge logs cost at now whatever the window holds: it counts past the
// quota.
func (m *windowModel) charge(now, cost int64) decision {
	m.seq++
	m.log = append(m.log, admission{now, cost, m.seq})
	d := m.decide(now, 1, true)
	d.ok = true
	return d
}

// takeFrom takes up to cost off the admissions in [from, to), the newest
// first, and returns how much it took.
func (m *windowModel) takeFrom(from, to, cost int64) int64 {
	var given int64
	for i := len(m.log) - 1; i >= 0 && given < cost; i-- {
		if a := &m.log[i]; a.t >= from && a.t < to {
			n := min(a.cost, cost-given)
			a.cost -= n
			given += n
		}
	}
	m.log = slices.DeleteFunc(m.log, func(a admission) bool { return a.cost == 0 })
	return given
}

// fixedTake: off the current window's count.
func fixedTake(m *windowModel, now, cost int64) int64 {
	s := windowStart(now, m.period)
	return m.takeFrom(s, s+m.period, cost)
}

// slidingTake: off the current window's count, then the previous one's.
func slidingTake(m *windowModel, now, cost int64) int64 {
	s := windowStart(now, m.period)
	given := m.takeFrom(s, s+m.period, cost)
	return given + m.takeFrom(s-m.period, s, cost-given)
}

// logTake: the newest entry of that cost among the newest 32 in the
// window, else off the newest entries. Entries of one time are ordered as
// Redis orders their members, "<t>:<seq>:<cost>", as strings.
func logTake(m *windowModel, now, cost int64) int64 {
	var in []*admission
	for i := range m.log {
		if a := &m.log[i]; a.t > now-m.period && a.t <= now {
			in = append(in, a)
		}
	}
	slices.SortFunc(in, func(a, b *admission) int { // newest first
		if a.t != b.t {
			return int(b.t - a.t)
		}
		return strings.Compare(strconv.FormatInt(b.seq, 10), strconv.FormatInt(a.seq, 10))
	})
	for _, a := range in[:min(len(in), 32)] {
		if a.cost == cost {
			a.cost = 0
			m.log = slices.DeleteFunc(m.log, func(a admission) bool { return a.cost == 0 })
			return cost
		}
	}
	var given int64
	for _, a := range in {
		n := min(a.cost, cost-given)
		a.cost -= n
		if given += n; given == cost {
			break
		}
	}
	m.log = slices.DeleteFunc(m.log, func(a admission) bool { return a.cost == 0 })
	return given
}

func newModel(alg Algorithm, l hybridlimit.Limit) model {
	p := ceilMicros(l.Period)
	switch alg {
	case TokenBucket, GCRA:
		return &bucketModel{rate: l.Rate, period: p, burst: l.Burst}
	case FixedWindow:
		return &windowModel{period: p, quota: l.Burst, used: fixedUsed, take: fixedTake}
	case SlidingWindow:
		return &windowModel{period: p, quota: l.Burst, used: slidingUsed, take: slidingTake}
	case SlidingLog:
		return &windowModel{period: p, quota: l.Burst, used: logUsed, take: logTake}
	}
	panic("unknown algorithm")
}

var modelLimits = []hybridlimit.Limit{
	hybridlimit.PerSecond(3),
	{Rate: 7, Period: 60_000_000 * us, Burst: 2},
	{Rate: 1000, Period: 1_000_000 * us, Burst: 50},
	hybridlimit.Every(250_000*us, 5),
	{Rate: 3, Period: 10_000 * us, Burst: 4},
	{Rate: 1_000_000, Period: 1_000_000 * us, Burst: 1_000_000},
	{Rate: 1_000_000_000, Period: 1_000_000 * us, Burst: 1_000_000_000},
	{Rate: 13, Period: 1_000_001 * us, Burst: 13},
	// Products such as Burst*Period and elapsed*Rate pass 2^53, where a Lua
	// number stops being exact.
	hybridlimit.PerHour(1e10),
	{Rate: 1e8, Period: time.Hour, Burst: 1e10},
	{Rate: 999_999_999_999, Period: 24 * time.Hour, Burst: 999_999_999_999},
	{Rate: 1 << 40, Period: 366 * 24 * time.Hour, Burst: 1 << 40},
}

// TestScriptsMatchModels runs on miniredis, whose TTLs do not run: the
// sequences jump the caller's clock by hours between calls a real server
// sees microseconds apart, and keys that ought to live by the caller's
// clock would expire by the server's. Real Redis's Lua does the same
// arithmetic (scripts.TestMulDiv).
func TestScriptsMatchModels(t *testing.T) {
	redistest.NoLeaks(t)
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog} {
		l, err := New(c, alg)
		if err != nil {
			t.Fatal(err)
		}
		for li, limit := range modelLimits {
			t.Run(fmt.Sprintf("%v/%v", alg, limit), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(uint64(alg), uint64(li))) // reproducible per subtest
				m := newModel(alg, limit)
				key := fmt.Sprintf("model-%d", li)
				now := t0.UnixMicro() + rng.Int64N(ceilMicros(limit.Period))
				var admitted, denied, refunds, charges int
				for i := range 180 {
					now += gap(rng, ceilMicros(limit.Period))
					cost := 1 + rng.Int64N(limit.Burst)
					if rng.IntN(2) == 0 {
						cost = 1 + rng.Int64N(min(limit.Burst, 3))
					}
					if rng.IntN(8) == 0 {
						// Usage known after the fact: up to three bursts.
						cost := 1 + rng.Int64N(3*limit.Burst)
						want := m.charge(now, cost)
						got, err := l.ChargeAt(t.Context(), timeUS(now), key, limit, cost)
						if err != nil {
							t.Fatalf("op %d: charge %d: %v", i, cost, err)
						}
						g := decision{got.Allowed, got.Remaining, int64(got.RetryAfter / us), int64(got.ResetAfter / us)}
						if g != want {
							t.Fatalf("op %d: at +%dus charge %d: script %+v, model %+v", i, now-t0.UnixMicro(), cost, g, want)
						}
						charges++
						continue
					}
					if rng.IntN(6) == 0 {
						wantGiven := m.refund(now, cost)
						given, err := l.RefundAt(t.Context(), timeUS(now), key, limit, cost)
						if err != nil {
							t.Fatalf("op %d: %v", i, err)
						}
						if given != wantGiven {
							t.Fatalf("op %d: at +%dus refund %d: script gave %d, model %d", i, now-t0.UnixMicro(), cost, given, wantGiven)
						}
						refunds++
						continue
					}
					peek := rng.IntN(5) == 0
					want := m.decide(now, cost, peek)
					var (
						got hybridlimit.Result
						err error
					)
					if peek {
						got, err = l.PeekAt(t.Context(), timeUS(now), key, limit, cost)
					} else {
						got, err = l.AllowAt(t.Context(), timeUS(now), key, limit, cost)
					}
					if err != nil {
						t.Fatalf("op %d: %v", i, err)
					}
					if got.Allowed {
						admitted++
					} else {
						denied++
					}
					g := decision{got.Allowed, got.Remaining, int64(got.RetryAfter / us), int64(got.ResetAfter / us)}
					if g != want {
						t.Fatalf("op %d: at +%dus cost %d peek %v: script %+v, model %+v", i, now-t0.UnixMicro(), cost, peek, g, want)
					}
				}
				if admitted == 0 || denied == 0 {
					t.Errorf("%d admitted, %d denied: the sequence does not exercise both paths", admitted, denied)
				}
				t.Logf("%d admitted, %d denied, %d refunds, %d charges", admitted, denied, refunds, charges)
			})
		}
	}
}

// gap draws the time to the next request: often none, often a little,
// sometimes around a period.
func gap(rng *rand.Rand, period int64) int64 {
	switch rng.IntN(4) {
	case 0:
		return 0
	case 1:
		return rng.Int64N(1000)
	case 2:
		return rng.Int64N(period/10 + 1)
	default:
		return rng.Int64N(2 * period)
	}
}

// TestLimitChangeMatchesModel switches the limit of one key at random among
// several, with random costs at random times, on the token bucket and
// GCRA, against an exact model that keeps the tokens a bucket holds across
// a change (refilled under the old limit, cut to the new burst; a full
// bucket is full under the new limit, as an absent key is). The model
// follows the script's decisions. The script must never admit a cost the
// model does not hold, never report more remaining than the model, and may
// deny only what a loss of less than a token per change since the bucket
// was last full explains: each conversion rounds toward fewer tokens, by
// less than 1/period of a token (the token bucket's fraction) or 1/rate of
// a microsecond (GCRA's arrival time), which a bucket full for a while has
// made up.
func TestLimitChangeMatchesModel(t *testing.T) {
	redistest.NoLeaks(t)
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	limits := []hybridlimit.Limit{
		hybridlimit.PerSecond(3),
		{Rate: 7, Period: time.Minute, Burst: 2},
		{Rate: 1000, Period: time.Second, Burst: 50},
		hybridlimit.Every(250*time.Millisecond, 5),
		hybridlimit.PerHour(10),
		{Rate: 13, Period: 1_000_001 * us, Burst: 13},
		hybridlimit.PerHour(1e10),
	}
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		l, err := New(c, alg)
		if err != nil {
			t.Fatal(err)
		}
		for seed := range 6 {
			t.Run(fmt.Sprintf("%v/%d", alg, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(alg), uint64(seed)))
				key := fmt.Sprintf("change-%d", seed)
				limit := limits[rng.IntN(len(limits))]
				m := &bucketModel{rate: limit.Rate, period: ceilMicros(limit.Period), burst: limit.Burst}
				now := t0.UnixMicro()
				changes, admitted, denied := 0, 0, 0
				fullSince := int64(-1)
				for i := range 300 {
					now += gap(rng, m.period)
					if rng.IntN(4) == 0 { // a new limit, converted at this call
						// Full stays full, as absent: as the script has it, which
						// may be short of the model by less than a unit per
						// change, and so not full at the instant the model is.
						old := limit
						limit = limits[rng.IntN(len(limits))]
						p, err := l.PeekAt(t.Context(), timeUS(now), key, old, 1)
						if err != nil {
							t.Fatal(err)
						}
						tok := m.at(now)
						if b := rat(limit.Burst); tok.Cmp(b) > 0 {
							tok = b
						}
						if p.Remaining < old.Burst {
							m.tokens, m.ts = tok, now
						} else {
							m.tokens = nil
						}
						m.rate, m.period, m.burst = limit.Rate, ceilMicros(limit.Period), limit.Burst
						changes++
						fullSince = -1
					}
					tok := m.at(now)
					// Full at an earlier call and still: the script, less than
					// a microsecond's refill short per change, is full too.
					if full := tok.Cmp(rat(m.burst)) == 0; !full {
						fullSince = -1
					} else if fullSince < 0 {
						fullSince = now
					} else if fullSince < now {
						changes = 0
					}
					cost := 1 + rng.Int64N(min(limit.Burst, 5))
					got, err := l.AllowAt(t.Context(), timeUS(now), key, limit, cost)
					if err != nil {
						t.Fatalf("op %d: %v", i, err)
					}
					if got.Remaining > floorRat(tok) {
						t.Fatalf("op %d under %v: remaining %d, the model holds %s", i, limit, got.Remaining, tok.FloatString(6))
					}
					if got.Allowed {
						admitted++
						if tok.Cmp(rat(cost)) < 0 {
							t.Fatalf("op %d under %v: admitted %d, the model holds %s", i, limit, cost, tok.FloatString(6))
						}
						tok.Sub(tok, rat(cost))
						m.tokens, m.ts = tok, now
						fullSince = -1
						continue
					}
					denied++
					if slack := new(big.Rat).Add(rat(cost), rat(int64(changes))); tok.Cmp(slack) >= 0 {
						t.Fatalf("op %d under %v: denied %d, the model holds %s after %d changes", i, limit, cost, tok.FloatString(6), changes)
					}
				}
				if admitted == 0 || denied == 0 {
					t.Errorf("%d admitted, %d denied: not both paths", admitted, denied)
				}
			})
		}
	}
}
