package account

import (
	"math"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// testPolicy is the default configuration's lease policy without jitter,
// so that durations come out exact.
func testPolicy() Policy {
	return Policy{Interval: 250 * time.Millisecond, Lookahead: 2, StretchCap: 64, LowLimit: 2}
}

var perSecond1000 = hybridlimit.Limit{Rate: 1000, Period: time.Second, Burst: 1000}

// steady is a whole key of 1000/s on one instance, spending 100/s, its
// bucket full.
func steady() Holding {
	return Holding{Limit: perSecond1000, Key: perSecond1000, Live: 1, Demand: 100, Held: 100, Left: 1000, Serving: true}
}

func TestLease(t *testing.T) {
	p := testPolicy()
	for _, tt := range []struct {
		name string
		edit func(*Holding)
		want int64
	}{
		// 100/s over two intervals is 50; the bucket's eighth (125) holds
		// twice that, not four times: stretched once.
		{"stretched once", func(*Holding) {}, 100},
		{"bucket empty: not stretched", func(h *Holding) { h.Left = 0 }, 50},
		{"bucket at an eighth of twice: not stretched", func(h *Holding) { h.Left = 799 }, 50},
		{"room for the cap: 64 leases of half a token", func(h *Holding) { h.Demand, h.Left = 1, 1000 }, 32},
		{"more instances share the room", func(h *Holding) { h.Live = 2 }, 50},
		{"no demand: the minimum lease", func(h *Holding) { h.Demand = 0 }, 8},
		{"minimum lease a quarter of a share", func(h *Holding) { h.Demand, h.Live = 0, 100 }, 2},
		{"idle past the hold", func(h *Holding) { h.Unused = 10 * time.Second }, 0},
		{"idle just under the hold", func(h *Holding) { h.Unused = 10*time.Second - 1 }, 100},
		{"a part not serving", func(h *Holding) { h.Serving = false }, 0},
		{"a low limit", func(h *Holding) {
			h.Limit = hybridlimit.Limit{Rate: 4, Period: time.Second, Burst: 1000}
			h.Key = h.Limit
		}, 0},
		{"a part of a key over the low limit", func(h *Holding) { h.Limit = hybridlimit.Limit{Rate: 4, Period: time.Second, Burst: 1000} }, 100},
	} {
		h := steady()
		tt.edit(&h)
		if got := p.Lease(h); got != tt.want {
			t.Errorf("%s: lease(%+v) = %d, want %d", tt.name, h, got, tt.want)
		}
	}
	if got := (Policy{Interval: 250 * time.Millisecond, Lookahead: 2, StretchCap: 1, LowLimit: 2}).Lease(steady()); got != 50 {
		t.Errorf("stretch cap 1: lease %d, want 50", got)
	}
}

func TestIsLowLimit(t *testing.T) {
	p := testPolicy()
	eight := hybridlimit.Limit{Rate: 8, Period: time.Second, Burst: 8} // 2 tokens an interval
	for _, tt := range []struct {
		live int64
		want bool
	}{
		{0, false}, // no instance seen yet counts as one
		{1, false}, // 2 per instance: at the threshold, not under it
		{2, true},  // 1 per instance
	} {
		if got := p.IsLowLimit(eight, tt.live); got != tt.want {
			t.Errorf("live %d: isLowLimit = %v, want %v", tt.live, got, tt.want)
		}
	}
}

func TestTopUp(t *testing.T) {
	p := testPolicy()
	for _, tt := range []struct {
		held, want, waiting int64
		excess, more        int64
	}{
		{0, 50, 0, 0, 50},   // under its low mark (37.5 at 100/s)
		{40, 50, 0, 0, 0},   // above it: nothing to say
		{40, 50, 1, 0, 10},  // a decision waits
		{60, 50, 3, 0, 0},   // holds what waits already
		{100, 50, 0, 0, 0},  // twice what it wants, not more
		{120, 50, 0, 70, 0}, // more than twice: hand back to want
		{5, 0, 0, 5, 0},     // wants nothing: hand back all
		{0, 0, 0, 0, 0},
	} {
		h := steady()
		h.Held = tt.held
		excess, more := p.TopUp(h, tt.waiting, tt.want)
		if excess != tt.excess || more != tt.more {
			t.Errorf("held %d, want %d, waiting %d: topUp = %d, %d; want %d, %d", tt.held, tt.want, tt.waiting, excess, more, tt.excess, tt.more)
		}
	}
	if w := p.Want(steady(), 2000); w != 1000 {
		t.Errorf("want with 2000 waiting = %d, want the burst", w)
	}
}

// TestRideBelow checks the mark under which a decision puts a key on the
// riders: its low mark, for a Reserve key that leases and whose bucket can
// feed it; none otherwise.
func TestRideBelow(t *testing.T) {
	p := testPolicy()
	for _, tt := range []struct {
		name string
		edit func(*Policy, *Holding)
		want int64
	}{
		// The lease is 100 (TestLease), so the low mark half of it, more
		// than an interval and a half of demand (37.5), and the ride mark
		// half of that.
		{"a quarter of the lease", func(*Policy, *Holding) {}, 25},
		{"bucket empty", func(_ *Policy, h *Holding) { h.Left = 0 }, 0},
		{"bucket cannot feed an interval of demand", func(_ *Policy, h *Holding) { h.Left = 24 }, 0},
		{"no demand measured", func(_ *Policy, h *Holding) { h.Demand = 0 }, 0},
		{"idle past the idle hold: no lease", func(p *Policy, h *Holding) { h.Unused = p.IdleHold() }, 0},
		{"low limit: no lease", func(_ *Policy, h *Holding) { h.Live = 1000 }, 0},
		{"optimistic", func(p *Policy, _ *Holding) { p.Optimistic = true }, 0},
		{"not serving", func(_ *Policy, h *Holding) { h.Serving = false }, 0},
	} {
		p, h := p, steady()
		tt.edit(&p, &h)
		if got := p.RideBelow(h); got != tt.want {
			t.Errorf("%s: RideBelow = %d, want %d", tt.name, got, tt.want)
		}
	}
	// A key whose demand over an interval and a half is more than half its
	// lease: 300/s over 375 ms is 112.5, the lease 150 unstretched; half
	// of 112.5, rounded up.
	h := steady()
	h.Demand, h.Left = 300, 1000
	if got, want := p.RideBelow(h), int64(57); got != want {
		t.Errorf("300/s: RideBelow = %d, want %d", got, want)
	}
}

func TestNext(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, tt := range []struct {
		name       string
		optimistic bool
		demand     float64
		held, left int64
		want       time.Duration
	}{
		{"no demand", false, 0, 0, 1000, ms(250)},
		{"holds a second of demand", false, 100, 100, 1000, ms(250)},
		{"runs out in 200ms: half of that", false, 100, 20, 1000, ms(100)},
		{"runs out in 100ms: a tick at least", false, 100, 10, 1000, ms(62.5)},
		{"bucket under a tenth: half an interval", false, 100, 100, 50, ms(125)},
		{"rationed: the bucket cannot feed it", false, 100, 10, 20, ms(125)},
		{"rationed optimistic: not", true, 100, 10, 20, ms(62.5)},
		{"bucket empty: no sooner", false, 100, 10, 0, ms(250)},
		{"bucket empty optimistic: sooner", true, 100, 10, 0, ms(62.5)},
	} {
		p := testPolicy()
		p.Optimistic = tt.optimistic
		h := steady()
		h.Demand, h.Held, h.Left = tt.demand, tt.held, tt.left
		if got := p.Next(h, 7); got != tt.want {
			t.Errorf("%s: next = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestQuiet(t *testing.T) {
	for _, tt := range []struct {
		name   string
		demand float64
		held   int64
		unused time.Duration
		left   int64
		want   time.Duration
	}{
		// Lease 100, low mark 50: 950 above it at 100/s is 9.5 s, a
		// quarter of which is past the 2 s cap.
		{"far above its low mark", 100, 1000, 0, 1000, 2 * time.Second},
		{"250 above: a quarter of 2.5s", 100, 300, 0, 1000, 625 * time.Millisecond},
		{"150 above: under two intervals", 100, 200, 0, 1000, 250 * time.Millisecond},
		{"bucket low: next", 100, 1000, 0, 99, 125 * time.Millisecond},
		{"unused 5s: the hold ends in 5s, capped", 0, 8, 5 * time.Second, 1000, 2 * time.Second},
		{"unused 9.8s: the hold ends sooner than two intervals", 0, 8, 9800 * time.Millisecond, 1000, 250 * time.Millisecond},
		{"just fetched, no demand yet", 0, 8, 100 * time.Millisecond, 1000, 250 * time.Millisecond},
	} {
		p := testPolicy()
		h := steady()
		h.Demand, h.Held, h.Unused, h.Left = tt.demand, tt.held, tt.unused, tt.left
		if got := p.Quiet(h, 7); got != tt.want {
			t.Errorf("%s: quiet = %v, want %v", tt.name, got, tt.want)
		}
		p.Optimistic = true
		if got, next := p.Quiet(h, 7), p.Next(h, 7); got != next {
			t.Errorf("%s, optimistic: quiet = %v, want next, %v", tt.name, got, next)
		}
	}
}

func TestJitter(t *testing.T) {
	p := testPolicy()
	p.Jitter = 0.1
	lo, hi := 2.0, 0.0
	for seed := range uint64(10_000) {
		f := p.JitterOf(seed)
		if f != p.JitterOf(seed) {
			t.Fatalf("seed %d: jitter not deterministic", seed)
		}
		lo, hi = min(lo, f), max(hi, f)
	}
	if lo < 0.9 || hi > 1.1 || lo > 0.91 || hi < 1.09 {
		t.Errorf("jitter 0.1 over 10,000 seeds spans [%v, %v], want about [0.9, 1.1]", lo, hi)
	}
	if f := testPolicy().JitterOf(12345); f != 1 {
		t.Errorf("no jitter: factor %v, want 1", f)
	}
}

func TestIdleHoldAndTick(t *testing.T) {
	for _, tt := range []struct {
		interval   time.Duration
		hold, tick time.Duration
	}{
		{250 * time.Millisecond, 10 * time.Second, 62500 * time.Microsecond},
		{time.Second, 40 * time.Second, 250 * time.Millisecond},
		{2 * time.Millisecond, 10 * time.Second, time.Millisecond},
	} {
		p := Policy{Interval: tt.interval}
		if p.IdleHold() != tt.hold || p.Tick() != tt.tick {
			t.Errorf("interval %v: idle hold %v, tick %v; want %v, %v", tt.interval, p.IdleHold(), p.Tick(), tt.hold, tt.tick)
		}
	}
}

// TestUsage steps the demand estimate over a time grid of rounds 250 ms
// apart, with a fetch between two of them.
func TestUsage(t *testing.T) {
	const interval = 250 * time.Millisecond
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	var u Usage
	for i, step := range []struct {
		at, consumed int64 // ms, tokens in all
		rate         float64
		usedAt       int64 // ms
	}{
		{250, 50, 200, 250},                        // 50 in a quarter second
		{500, 50, 100, 250},                        // none: decays by half
		{750, 50, 50, 250},                         // none again
		{800, 80, 30 / 0.55, 250},                  // a fetch: 30 over the 550 ms since use, above 50, so raised
		{1000, 80, (30/0.55 + 30/0.75) / 2, 1000},  // a round: 30 over 750 ms, the average of it and the raised rate
		{1010, 81, (30/0.55 + 30/0.75) / 2, 1000},  // a fetch 10 ms on: 1 over half an interval is less
		{1250, 100, 20 / 0.25, 1250},               // 20 in 250 ms: a rise, at once
		{1250 + 0, 100, 20 / 0.25, 1250},           // the same instant: nothing measured
		{1500, 100, 20 / 0.25 / 2, 1250},           // quiet again
		{1500 + 500, 100, 20 / 0.25 / 2 / 2, 1250}, // a late round, half again
		{2000 + 1000, 100, 20 / 0.25 / 2 / 2 / 2, 1250},
	} {
		u.Observe(step.consumed, ms(step.at), interval)
		if math.Abs(u.Rate-step.rate) > 1e-9 || u.UsedAt != ms(step.usedAt) {
			t.Errorf("step %d at %dms, %d consumed: rate %v, used at %v; want %v, %dms", i, step.at, step.consumed, u.Rate, time.Duration(u.UsedAt), step.rate, step.usedAt)
		}
	}
}

// TestFull: a bucket of 10 a second holding 9 is full a token's time
// later, not before; one holding none, a second later.
func TestFull(t *testing.T) {
	limit := hybridlimit.PerSecond(10)
	ms := int64(time.Millisecond)
	for _, c := range []struct {
		left, since int64
		want        bool
	}{{9, 99 * ms, false}, {9, 100 * ms, true}, {0, 999 * ms, false}, {0, 1000 * ms, true}, {10, 0, true}} {
		if got := Full(limit, c.left, c.since); got != c.want {
			t.Errorf("Full(%v, %d left, %v since) = %v, want %v", limit, c.left, time.Duration(c.since), got, c.want)
		}
	}
}
