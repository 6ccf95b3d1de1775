package local

import (
	"strconv"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// farTimes are explicit times far from the present, each paired with a
// limit whose token clock runs fast enough that, unclamped, the time lies
// more than 2^63 units before a state written now.
var farTimes = []struct {
	name  string
	limit hybridlimit.Limit
	at    time.Time
}{
	{"PerSecond(10) zero time", hybridlimit.PerSecond(10), time.Time{}},
	{"PerSecond(7) Unix 0", hybridlimit.PerSecond(7), time.Unix(0, 0)},
	{"PerSecond(13) 1990", hybridlimit.PerSecond(13), time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)},
	{"2^40/ms a day back", hybridlimit.Limit{Rate: hybridlimit.MaxQuantity, Period: time.Millisecond, Burst: 3}, time.Now().Add(-24 * time.Hour)},
}

// TestBucketFarPastTimeAdmitsNothing checks that a time far in the past sees
// a bucket drained now as drained: alternating it with now admits nothing.
func TestBucketFarPastTimeAdmitsNothing(t *testing.T) {
	for _, ft := range farTimes {
		t.Run(ft.name, func(t *testing.T) {
			b := mustBucket(t, ft.limit)
			now := time.Now()
			if !b.AllowN(now, ft.limit.Burst) {
				t.Fatalf("AllowN(now, %d) = false on a full bucket", ft.limit.Burst)
			}
			admitted := 0
			for range 1000 {
				if b.AllowN(ft.at, 1) {
					admitted++
				}
				if b.AllowN(now, 1) {
					admitted++
				}
			}
			if admitted > 0 {
				t.Errorf("drained at now, then AllowN(%v, 1) and AllowN(now, 1) admitted %d, want 0", ft.at, admitted)
			}
			if got := b.TokensAt(ft.at); got != 0 {
				t.Errorf("TokensAt(%v) = %d, want 0", ft.at, got)
			}
		})
	}
}

// TestTableFarPastTimeAdmitsNothing is TestBucketFarPastTimeAdmitsNothing on
// a Table, through AllowN and Peek.
func TestTableFarPastTimeAdmitsNothing(t *testing.T) {
	for _, ft := range farTimes {
		t.Run(ft.name, func(t *testing.T) {
			tb := mustTable(t)
			now := time.Now()
			if r, _ := tb.AllowN("k", now, ft.limit, ft.limit.Burst); !r.Allowed {
				t.Fatalf("AllowN(k, now, %d) = %+v on a full bucket", ft.limit.Burst, r)
			}
			admitted := 0
			for range 1000 {
				if r, _ := tb.AllowN("k", ft.at, ft.limit, 1); r.Allowed {
					admitted++
				}
				if r, _ := tb.AllowN("k", now, ft.limit, 1); r.Allowed {
					admitted++
				}
			}
			if admitted > 0 {
				t.Errorf("drained at now, then AllowN(k, %v, 1) and AllowN(k, now, 1) admitted %d, want 0", ft.at, admitted)
			}
			if r, _ := tb.Peek("k", ft.at, ft.limit, 1); r.Allowed || r.Remaining != 0 {
				t.Errorf("Peek(k, %v, 1) = %+v, want denied with 0 remaining", ft.at, r)
			}
		})
	}
}

// TestFarPastTimeAfterLongUse checks that the present explicit times are
// clamped around follows the implicit-time calls too: a bucket used by
// Take or Allow alone for 100 years (its base moved back to pretend so) is
// not misread by a call 30 years back, 70 years after it was made.
func TestFarPastTimeAfterLongUse(t *testing.T) {
	l := hybridlimit.PerSecond(13) // 13 units a nanosecond: 2^63 units is 22 years
	const age = 100 * 365 * 24 * time.Hour
	past := time.Now().Add(-30 * 365 * 24 * time.Hour)
	b := mustBucket(t, l)
	b.base = b.base.Add(-age)
	b.tat.Store(b.p.full(since(b.base)))
	for b.Take().Allowed {
	}
	if b.AllowN(past, 1) {
		t.Errorf("Bucket: drained by Take after 100 years, then AllowN(%v, 1) = true, want false", past)
	}

	tb := mustTable(t, WithShards(1))
	tb.base = tb.base.Add(-age)
	for {
		if r, _ := tb.Allow("k", l); !r.Allowed {
			break
		}
	}
	if r, _ := tb.AllowN("k", past, l, 1); r.Allowed {
		t.Errorf("Table: drained by Allow after 100 years, then AllowN(k, %v, 1) = %+v, want denied", past, r)
	}
}

// TestTableFarTimeKeepsSpentKeys checks that inserts and Sweep at a time far
// from the present forget no bucket that is still short of tokens now.
func TestTableFarTimeKeepsSpentKeys(t *testing.T) {
	l := hybridlimit.PerSecond(10)
	for _, far := range []time.Time{{}, time.Unix(0, 0), time.Now().Add(100 * 365 * 24 * time.Hour)} {
		now := time.Now()
		tb := mustTable(t, WithShards(1))
		if r, _ := tb.AllowN("victim", now, l, l.Burst); !r.Allowed {
			t.Fatal("AllowN(victim, now, Burst) denied on a full bucket")
		}
		for i := range 64 {
			tb.AllowN("other"+strconv.Itoa(i), far, l, 1)
		}
		if r, _ := tb.AllowN("victim", now, l, 1); r.Allowed {
			t.Errorf("inserts of other keys at %v forgot a drained key: AllowN(victim, now, 1) = %+v, want denied", far, r)
		}

		tb = mustTable(t, WithShards(1))
		tb.AllowN("victim", now, l, l.Burst)
		if n := tb.Sweep(far); n != 0 {
			t.Errorf("Sweep(%v) = %d, want 0: the only key is drained", far, n)
		}
		if r, _ := tb.AllowN("victim", now, l, 1); r.Allowed {
			t.Errorf("after Sweep(%v), AllowN(victim, now, 1) = %+v, want denied", far, r)
		}
	}
}

// TestWindowSpan checks the window of the extreme limits: over a span the
// clock advances by at most windowUnits+1 units, so two times in one window
// are less than 2^61+2 units apart, and the span exceeds presentLead, so a
// clock reading is never clamped.
func TestWindowSpan(t *testing.T) {
	for _, l := range []hybridlimit.Limit{
		hybridlimit.PerSecond(10),
		hybridlimit.PerSecond(13),
		{Rate: 16, Period: 1, Burst: 1},
		{Rate: 17, Period: time.Second, Burst: 17},
		{Rate: 1, Period: hybridlimit.MaxRefill, Burst: 1},
		{Rate: hybridlimit.MaxQuantity, Period: time.Millisecond, Burst: hybridlimit.MaxQuantity},
		{Rate: hybridlimit.MaxQuantity, Period: hybridlimit.MinPeriod, Burst: 1},
	} {
		if l.Validate() != nil {
			continue
		}
		p, err := newParams(l)
		if err != nil {
			t.Fatal(err)
		}
		if p.span <= presentLead || p.span > windowUnits {
			t.Errorf("%v: span %v, want in (%v, 2^60ns]", l, time.Duration(p.span), time.Duration(presentLead))
		}
		for _, x := range []int64{epoch - p.span, epoch, epoch + 12345, epoch + p.span} {
			if got := p.clock(x+p.span) - p.clock(x); got > windowUnits+1 {
				t.Errorf("%v: clock advances %d units over span %v from %d, want at most 2^60+1", l, got, time.Duration(p.span), x)
			}
		}
	}
}
