package global

import (
	"fmt"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// changeStep is one decision at t0+at under its own limit. rem < 0 skips
// the Remaining check; retry > 0 bounds RetryAfter of a denial from above.
type changeStep struct {
	at    time.Duration
	limit hybridlimit.Limit
	cost  int64
	ok    bool
	rem   int64
	retry time.Duration
}

// TestLimitChange asks keys under a limit, then another, on a real Redis:
// a raised limit admits within one refill of the new limit (an exhausted
// PerHour(10) raised to PerSecond(1000) admitted nothing for an hour under
// GCRA, whose stored time was read at the new rate: 0 of 20, RetryAfter
// 59m59s); a lowered one clamps at once; the window algorithms keep the
// count of the window of the change.
func TestLimitChange(t *testing.T) {
	hour, fast := hybridlimit.PerHour(10), hybridlimit.PerSecond(1000)
	slow := hybridlimit.PerSecond(100)
	ms := time.Millisecond
	// The window algorithms' raise comes half an hour into the hour's
	// window, so the new window of a second starts after the old one.
	half := 30 * time.Minute
	bucket := map[string][]changeStep{
		"raised": {
			{0, hour, 10, true, 0, 0},
			{0, hour, 1, false, 0, 0},
			// 1ms refilled 0.000003 tokens under the old limit: kept,
			// and a token of the new limit arrives 1ms later.
			{1 * ms, fast, 1, false, 0, time.Millisecond},
			{21 * ms, fast, 20, true, 0, 0},
			{21 * ms, fast, 1, false, 0, time.Millisecond},
			{time.Second + 21*ms, fast, 1000, true, 0, 0},
		},
		"lowered": {
			{0, fast, 500, true, 500, 0},
			{0, slow, 100, true, 0, 0},
			{0, slow, 1, false, 0, 0},
			{time.Second, slow, 100, true, 0, 0},
		},
		// The first call under the new limit is denied and writes the
		// state under it: had it written nothing, the next call would
		// refill at the old rate, and the fast limit is full again in
		// 10ms.
		"denied at the change": {
			{0, fast.WithBurst(10), 10, true, 0, 0},
			{0, hybridlimit.PerHour(1).WithBurst(10), 1, false, 0, 0},
			{200 * ms, hybridlimit.PerHour(1).WithBurst(10), 1, false, 0, 0},
		},
	}
	windows := map[Algorithm]map[string][]changeStep{
		FixedWindow: {
			"raised": {
				{half, hour, 10, true, 0, 0},
				{half + 1*ms, fast, 990, true, 0, 0}, // the hour's 10 count in this second
				{half + 1*ms, fast, 1, false, 0, 0},
				{half + time.Second, fast, 1000, true, 0, 0},
			},
			"lowered": {
				{0, fast, 500, true, 500, 0},
				{0, slow, 1, false, 0, 0},
				{time.Second, slow, 100, true, 0, 0},
			},
			"quota raised": {
				{0, hour, 10, true, 0, 0},
				{0, hybridlimit.PerHour(1000), 990, true, 0, 0},
				{0, hybridlimit.PerHour(1000), 1, false, 0, 0},
			},
		},
		SlidingWindow: {
			"raised": {
				{half, hour, 10, true, 0, 0},
				{half + 1*ms, fast, 990, true, 0, 0},
				{half + 1*ms, fast, 1, false, 0, 0},
				{half + 1500*ms, fast, 500, true, 0, 0}, // the second's 1000 weigh half
				{half + 2*time.Second, fast, 1, true, -1, 0},
			},
			"lowered": {
				{0, fast, 500, true, 500, 0},
				{0, slow, 1, false, 0, 0},
				{2 * time.Second, slow, 100, true, 0, 0},
			},
		},
		SlidingLog: {
			"raised": {
				{half, hour, 10, true, 0, 0},
				{half + 1*ms, fast, 990, true, 0, 0},
				{half + 1*ms, fast, 1, false, 0, 0},
				{half + time.Second + 1*ms, fast, 1000, true, 0, 0},
			},
			"lowered": {
				{0, fast, 500, true, 500, 0},
				{0, slow, 1, false, 0, 0},
				{time.Second, slow, 100, true, 0, 0},
			},
		},
	}
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	play := func(t *testing.T, l *Limiter, key string, steps []changeStep) {
		t.Helper()
		for i, s := range steps {
			r, err := l.AllowAt(t.Context(), t0.Add(s.at), key, s.limit, s.cost)
			if err != nil {
				t.Fatalf("step %d: AllowAt(t0+%v, %v, %d): %v", i, s.at, s.limit, s.cost, err)
			}
			if r.Allowed != s.ok || s.rem >= 0 && r.Remaining != s.rem || s.retry > 0 && (r.RetryAfter <= 0 || r.RetryAfter > s.retry) {
				t.Errorf("step %d: AllowAt(t0+%v, %v, %d) = %+v, want allowed %v, remaining %d, retry in (0, %v]",
					i, s.at, s.limit, s.cost, r, s.ok, s.rem, s.retry)
			}
		}
	}
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog} {
		l, err := New(c, alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		cases := windows[alg]
		if cases == nil {
			cases = bucket
		}
		for name, steps := range cases {
			t.Run(fmt.Sprintf("%v/%s", alg, name), func(t *testing.T) { play(t, l, name, steps) })
		}
	}
	checkTTLs(t, c, p)
}
