package global

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// step is one decision at t0+at and what it must answer.
type step struct {
	at    time.Duration
	cost  int64
	peek  bool
	ok    bool
	rem   int64
	retry time.Duration
	reset time.Duration
}

type row struct {
	name  string
	limit hybridlimit.Limit
	steps []step
}

// run plays a row's steps on a fresh key at virtual times. The steps of a
// row share state; rows never do.
func run(t *testing.T, l *Limiter, key string, r row) {
	t.Helper()
	for i, s := range r.steps {
		var (
			got hybridlimit.Result
			err error
			op  = "AllowAt"
		)
		if s.peek {
			op = "PeekAt"
			got, err = l.PeekAt(t.Context(), t0.Add(s.at), key, r.limit, s.cost)
		} else {
			got, err = l.AllowAt(t.Context(), t0.Add(s.at), key, r.limit, s.cost)
		}
		if err != nil {
			t.Fatalf("step %d: %s(t0+%v, %d): %v", i, op, s.at, s.cost, err)
		}
		want := hybridlimit.Result{Limit: r.limit, Allowed: s.ok, Source: hybridlimit.SourceGlobal, Remaining: s.rem, RetryAfter: s.retry, ResetAfter: s.reset}
		if got != want {
			t.Errorf("step %d: %s(t0+%v, %d) = %+v, want %+v", i, op, s.at, s.cost, got, want)
		}
	}
}

func runTable(t *testing.T, alg Algorithm, rows []row) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	l, err := New(c, alg, WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			run(t, l, fmt.Sprintf("row%d", i), r)
		})
	}
	checkTTLs(t, c, p)
}

// bucketRows hold for TokenBucket and GCRA alike: they make the same
// decisions, exactly, from different state.
var bucketRows = func() []row {
	three := hybridlimit.PerSecond(3) // one token every 333333.33us
	const T = 333334 * us             // ceil of the emission interval
	seven := hybridlimit.Limit{Rate: 7, Period: time.Minute, Burst: 2}
	return []row{
		{"burst then deny", three, []step{
			{0, 1, false, true, 2, 0, T},
			{0, 1, false, true, 1, 0, 666667 * us},
			{0, 1, false, true, 0, 0, time.Second},
			{0, 1, false, false, 0, T, time.Second},
		}},
		{"a token is back after exactly one interval", three, []step{
			{0, 3, false, true, 0, 0, time.Second},
			{333333 * us, 1, false, false, 0, 1 * us, 666667 * us},
			{333334 * us, 1, false, true, 0, 0, time.Second},
		}},
		{"a cost above the tokens held is denied whole", three, []step{
			{0, 2, false, true, 1, 0, 666667 * us},
			{0, 2, false, false, 1, T, 666667 * us},
			{0, 1, true, true, 1, 0, 666667 * us},
			{0, 1, false, true, 0, 0, time.Second},
		}},
		{"peek spends nothing", three, []step{
			{0, 3, true, true, 3, 0, 0},
			{0, 3, false, true, 0, 0, time.Second},
			{0, 1, true, false, 0, T, time.Second},
		}},
		{"partial refill", three, []step{
			{0, 3, false, true, 0, 0, time.Second},
			{500 * time.Millisecond, 1, false, true, 0, 0, 833334 * us},
			{500 * time.Millisecond, 1, false, false, 0, 166667 * us, 833334 * us},
		}},
		{"idle time refills to burst and no more", three, []step{
			{0, 3, false, true, 0, 0, time.Second},
			{10 * time.Second, 1, false, true, 2, 0, T},
		}},
		{"emission interval not a whole microsecond", seven, []step{
			{0, 2, false, true, 0, 0, 17142858 * us},
			{0, 1, false, false, 0, 8571429 * us, 17142858 * us},
			{8571428 * us, 1, false, false, 0, 1 * us, 8571430 * us},
			{8571429 * us, 1, false, true, 0, 0, 17142857 * us},
		}},
		{"a clock that steps back refills nothing", three, []step{
			{time.Second, 3, false, true, 0, 0, time.Second},
			{0, 1, false, false, 0, 1333334 * us, 2 * time.Second},
		}},
		// Products such as elapsed*Rate and Burst*Period pass 2^53 below,
		// where a Lua number stops being exact.
		{"a refill past 2^53 counts every whole token", hybridlimit.PerHour(1e10), []step{
			{0, 1e10, false, true, 0, 0, time.Hour},
			{2312528663 * us, 6423690730, true, true, 6423690730, 0, 1287471337 * us}, // 6423690730.56 tokens
			{2312528663 * us, 6423690730, false, true, 0, 0, time.Hour},
		}},
		{"a deep refill past 2^53 decides", hybridlimit.Limit{Rate: 1e8, Period: time.Hour, Burst: 1e10}, []step{
			{0, 1e10, false, true, 0, 0, 100 * time.Hour},
			{288907563266 * us, 8025210091, false, false, 8025210090, 10 * us, 71092436734 * us}, // 8025210090.72 tokens
			{288907563266 * us, 8025210090, false, true, 0, 0, 359999999974 * us},
		}},
		{"a burst times period past 2^53 is all remaining", hybridlimit.Limit{Rate: 999_999_999_999, Period: 24 * time.Hour, Burst: 999_999_999_999}, []step{
			{0, 1, true, true, 999_999_999_999, 0, 0},
			{0, 1, false, true, 999_999_999_998, 0, 1 * us},
		}},
	}
}()

func TestTokenBucketAllowAt(t *testing.T) { runTable(t, TokenBucket, bucketRows) }

func TestGCRAAllowAt(t *testing.T) { runTable(t, GCRA, bucketRows) }

func TestFixedWindowAllowAt(t *testing.T) {
	three := hybridlimit.PerMinute(3)
	runTable(t, FixedWindow, []row{
		{"quota then deny until the next window", three, []step{
			{0, 1, false, true, 2, 0, time.Minute},
			{20 * time.Second, 1, false, true, 1, 0, 40 * time.Second},
			{59 * time.Second, 1, false, true, 0, 0, time.Second},
			{59 * time.Second, 1, false, false, 0, time.Second, time.Second},
			{time.Minute, 1, false, true, 2, 0, time.Minute},
		}},
		{"a cost counts whole", three, []step{
			{10 * time.Second, 2, false, true, 1, 0, 50 * time.Second},
			{10 * time.Second, 2, false, false, 1, 50 * time.Second, 50 * time.Second},
			{10 * time.Second, 1, false, true, 0, 0, 50 * time.Second},
		}},
		{"peek spends nothing", three, []step{
			{0, 3, true, true, 3, 0, 0},
			{0, 3, false, true, 0, 0, time.Minute},
			{30 * time.Second, 1, true, false, 0, 30 * time.Second, 30 * time.Second},
		}},
		{"windows align to the epoch", three, []step{
			{90 * time.Second, 3, false, true, 0, 0, 30 * time.Second},
			{119 * time.Second, 1, false, false, 0, time.Second, time.Second},
			{120 * time.Second, 3, false, true, 0, 0, time.Minute},
		}},
		{"a clock that steps back stays in the later window", three, []step{
			{time.Minute, 3, false, true, 0, 0, time.Minute},
			{59 * time.Second, 1, false, false, 0, 61 * time.Second, 61 * time.Second},
		}},
	})
}

func TestSlidingWindowAllowAt(t *testing.T) {
	ten := hybridlimit.PerMinute(10)
	runTable(t, SlidingWindow, []row{
		{"a full window decays through the next", ten, []step{
			{0, 10, false, true, 0, 0, 2 * time.Minute},
			{0, 1, false, false, 0, 66 * time.Second, 2 * time.Minute},
			{65999999 * us, 1, false, false, 0, 1 * us, 54000001 * us},
			{66 * time.Second, 1, false, true, 0, 0, 114 * time.Second},
			{66 * time.Second, 1, false, false, 0, 6 * time.Second, 114 * time.Second},
		}},
		{"two idle windows forget everything", ten, []step{
			{0, 10, false, true, 0, 0, 2 * time.Minute},
			{2 * time.Minute, 10, false, true, 0, 0, 2 * time.Minute},
		}},
		{"a fractional weight rounds against the caller", ten, []step{
			{30 * time.Second, 7, false, true, 3, 0, 90 * time.Second},
			{80 * time.Second, 5, false, true, 0, 0, 100 * time.Second},
			{80 * time.Second, 1, false, false, 0, 5714286 * us, 100 * time.Second},
		}},
		{"peek spends nothing", ten, []step{
			{0, 10, true, true, 10, 0, 0},
			{30 * time.Second, 4, false, true, 6, 0, 90 * time.Second},
			{90 * time.Second, 6, true, true, 8, 0, 30 * time.Second},
		}},
		// prev*left passes 2^53: the weight must still round up exactly.
		{"a weight past 2^53 is exact", hybridlimit.PerHour(1e10), []step{
			{-time.Hour, 5_787_020_512, false, true, 4_212_979_488, 0, 2 * time.Hour},
			{0, 3_961_086_156, false, true, 251_893_332, 0, 2 * time.Hour},
			{1_256_438_568 * us, 1, true, true, 2_271_625_488, 0, 5_943_561_432 * us},
			{1_256_438_568 * us, 2_271_625_489, true, false, 2_271_625_488, 1 * us, 5_943_561_432 * us},
		}},
	})
}

func TestSlidingLogAllowAt(t *testing.T) {
	three := hybridlimit.PerMinute(3)
	runTable(t, SlidingLog, []row{
		{"deny until the oldest request leaves", three, []step{
			{0, 1, false, true, 2, 0, time.Minute},
			{10 * time.Second, 1, false, true, 1, 0, time.Minute},
			{20 * time.Second, 1, false, true, 0, 0, time.Minute},
			{30 * time.Second, 1, false, false, 0, 30 * time.Second, 50 * time.Second},
			{59999999 * us, 1, false, false, 0, 1 * us, 20000001 * us},
			{time.Minute, 1, false, true, 0, 0, time.Minute},
		}},
		{"a cost is logged whole", three, []step{
			{0, 1, false, true, 2, 0, time.Minute},
			{10 * time.Second, 2, false, true, 0, 0, time.Minute},
			{30 * time.Second, 2, false, false, 0, 40 * time.Second, 40 * time.Second},
			{time.Minute, 1, false, true, 0, 0, time.Minute},
		}},
		{"requests in the same microsecond are distinct", three, []step{
			{0, 1, false, true, 2, 0, time.Minute},
			{0, 1, false, true, 1, 0, time.Minute},
			{0, 1, false, true, 0, 0, time.Minute},
			{0, 1, false, false, 0, time.Minute, time.Minute},
		}},
		{"peek spends nothing", three, []step{
			{0, 3, true, true, 3, 0, 0},
			{0, 2, false, true, 1, 0, time.Minute},
			{30 * time.Second, 2, true, false, 1, 30 * time.Second, 30 * time.Second},
		}},
		// The request stamped 30s comes after one stamped 61s, which
		// dropped the first two from the log. Logged at 30s, it left the
		// log at 90s and a fourth request fit in the 60s that end at 91s;
		// logged at 61s, the later time already seen, it stays as long.
		// Times in replies count from the caller's clock, as the fixed
		// window's do.
		{"a clock that steps back counts at the later time", three, []step{
			{0, 2, false, true, 1, 0, time.Minute},
			{61 * time.Second, 1, false, true, 2, 0, time.Minute},
			{30 * time.Second, 2, false, true, 0, 0, 91 * time.Second},
			{30 * time.Second, 1, true, false, 0, 91 * time.Second, 91 * time.Second},
			{91 * time.Second, 1, false, false, 0, 30 * time.Second, 30 * time.Second},
		}},
	})
}

// TestTokenBucketPeriodChange asks one key under two ways of writing a
// rate (60 a minute, then 1 a second, burst 2): the stored fraction of a
// token was read in the units of the new period, half a token as thirty,
// and the bucket filled. Both algorithms must admit at most burst plus
// what 1.5s refills at 1/s.
func TestTokenBucketPeriodChange(t *testing.T) {
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	perMin := hybridlimit.Limit{Rate: 60, Period: time.Minute, Burst: 2}
	perSec := hybridlimit.Limit{Rate: 1, Period: time.Second, Burst: 2}
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		l, err := New(c, alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		var admitted int64
		for _, s := range []struct {
			at   time.Duration
			lim  hybridlimit.Limit
			cost int64
		}{{0, perMin, 2}, {1500 * time.Millisecond, perMin, 1}, {1500*time.Millisecond + time.Microsecond, perSec, 2}} {
			r, err := l.AllowAt(t.Context(), t0.Add(s.at), "k", s.lim, s.cost)
			if err != nil {
				t.Fatalf("%s at t0+%v: %v", alg, s.at, err)
			}
			if r.Allowed {
				admitted += s.cost
			}
		}
		if admitted > 3 {
			t.Errorf("%s admitted %d tokens in 1.5s at 1/s, burst 2 (at most 3)", alg, admitted)
		}
	}
	// A shorter period at the instant of the last write: the reply was
	// malformed (a negative reset) and the key got a 1ms TTL.
	hourly := hybridlimit.Limit{Rate: 1, Period: time.Hour, Burst: 3}
	fast := hybridlimit.Limit{Rate: 1, Period: time.Second, Burst: 3}
	l, err := New(c, TokenBucket, WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		at  time.Time
		lim hybridlimit.Limit
	}{{t0.Add(-30 * time.Minute), hourly}, {t0, hourly}, {t0, fast}} {
		if _, err := l.AllowAt(t.Context(), s.at, "h", s.lim, 1); err != nil {
			t.Errorf("AllowAt(%v, %v) = %v", s.at, s.lim, err)
		}
	}
}

// TestGCRARateChange asks one key under a rate of 2^40 an hour, then 1 a
// second: the stored fraction of a microsecond, in units of 1/2^40, was
// read in units of the new rate, 1us, as an hour, and the key reported
// nothing remaining for an hour. Half the bucket of 2^40 is more than the
// new burst of 3600: the key is full under the new limit.
func TestGCRARateChange(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	l, err := New(c, GCRA, WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	huge := hybridlimit.Limit{Rate: 1 << 40, Period: time.Hour, Burst: 1 << 40}
	run(t, l, "k", row{"half the bucket", huge, []step{
		{0, 1<<39 + 1, false, true, 1<<39 - 1, 0, 1_800_000_001 * us},
	}})
	run(t, l, "k", row{"then one a second", hybridlimit.Limit{Rate: 1, Period: time.Second, Burst: 3600}, []step{
		{time.Second, 1, true, true, 3600, 0, 0},
		{time.Second, 1, false, true, 3599, 0, time.Second},
	}})
	// The previous version's state, a hash under the kind "gcra", is
	// neither read nor written: the key starts full beside it (see
	// docs/design.md, section 2), and the hash keeps its fields and TTL.
	old, err := keyNames(l.ks, "old", "gcra")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(t.Context(), old[0], "t", t0.UnixMicro()+1000, "f", 5e9).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PExpire(t.Context(), old[0], time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	run(t, l, "old", row{"beside the previous version's hash", hybridlimit.PerSecond(3), []step{
		{0, 1, true, true, 3, 0, 0},
		{0, 1, false, true, 2, 0, 333334 * us},
	}})
	if f, err := c.HGet(t.Context(), old[0], "f").Result(); err != nil || f != "5000000000" {
		t.Errorf("the previous version's hash: f = %q, %v; want it untouched", f, err)
	}
	if ttl := c.PTTL(t.Context(), old[0]).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("the previous version's hash: PTTL %v, want the minute it was given", ttl)
	}
}

// TestGCRATTLCoversState plays admissions, refunds and limit changes on one
// GCRA key on Redis's own clock and checks, after each, that the key lives
// at least until its bucket is full again: its PTTL reaches the ResetAfter
// a peek reports. A write sets the TTL only when the arrival time moves
// into a later two-second block than the one the TTL was set for, and
// keeps it otherwise; a write that kept a TTL too short for the state would
// let the key expire while its bucket is still short, and the next call
// would find it full.
func TestGCRATTLCoversState(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	l, err := New(c, GCRA, WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	key, err := l.Keys("k")
	if err != nil {
		t.Fatal(err)
	}
	// A token is 1ms or 1.25ms: costs of 100 to 400 move the arrival time
	// across two-second blocks within a few calls, up to 10s ahead.
	limits := []hybridlimit.Limit{
		{Rate: 1000, Period: time.Second, Burst: 10000},
		{Rate: 800, Period: time.Second, Burst: 8000},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var kept, set int
	for i := range 200 {
		limit := limits[rng.IntN(len(limits))]
		before := c.PTTL(t.Context(), key[0]).Val()
		cost := 100 + rng.Int64N(301)
		op := "AllowN"
		if rng.IntN(4) == 0 {
			op = "Give"
			_, err = l.Give(t.Context(), "k", limit, cost)
		} else {
			_, err = l.AllowN(t.Context(), "k", limit, cost)
		}
		if err != nil {
			t.Fatalf("op %d: %s: %v", i, op, err)
		}
		r, err := l.Peek(t.Context(), "k", limit)
		if err != nil {
			t.Fatal(err)
		}
		ttl := c.PTTL(t.Context(), key[0]).Val()
		if r.ResetAfter > 0 && ttl < r.ResetAfter {
			t.Fatalf("op %d: %s %d under %v: PTTL %v, the bucket is full in %v", i, op, cost, limit, ttl, r.ResetAfter)
		}
		if before > 0 && ttl > 0 {
			if ttl <= before {
				kept++
			} else {
				set++
			}
		}
		if i%50 == 49 {
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
	}
	if kept == 0 || set == 0 {
		t.Errorf("TTL kept %d times, set %d times: the sequence does not exercise both", kept, set)
	}
	t.Logf("TTL kept %d times, set %d times", kept, set)
}
