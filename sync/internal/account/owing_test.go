package account

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestOwingSteps steps what one key owes over an outage and its end on a
// millisecond grid: what the failure policy admits is owed from its first
// admission; a reply that applies a message takes what it carried, and
// what was admitted after the message stays owed from the message's time.
func TestOwingSteps(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	var d Owing
	d.Share = &local.Core{}
	for i, step := range []struct {
		at      int64 // ms
		admit   int64 // the policy admits
		answer  bool  // a reply comes, to a message prepared at sent carrying carried
		sent    int64
		carried int64
		applied bool
		// want:
		owed, since int64
	}{
		{100, 3, false, 0, 0, false, 3, 100},
		{200, 2, false, 0, 0, false, 5, 100},
		// A message prepared at 250 carries 5; 1 more is admitted before
		// the reply, which applies it at 300.
		{260, 1, false, 0, 0, false, 6, 100},
		{300, 0, true, 250, 5, true, 1, 250},
		// A reply that applied nothing (a closed part) takes nothing.
		{400, 0, true, 350, 1, false, 1, 250},
		{500, 0, true, 450, 1, true, 0, 450},
	} {
		if step.admit > 0 {
			d.Add(step.admit, ms(step.at))
		}
		if step.answer {
			d.Answered(step.carried, step.applied, ms(step.sent))
			if d.Share != nil {
				t.Fatalf("step %d: the share outlives a reply", i)
			}
		}
		if d.Owed != step.owed || d.Owed > 0 && d.Since != ms(step.since) {
			t.Fatalf("step %d at %dms: owes %d since %v; want %d since %dms", i, step.at, d.Owed, time.Duration(d.Since), step.owed, step.since)
		}
	}
}

// TestSeedShare checks where a share bucket starts: full for a key never
// heard of, its part of what the bucket held at the last reply, empty
// until its part of the bucket's debt refills, and what an old share holds.
func TestSeedShare(t *testing.T) {
	sec := int64(time.Second)
	limit := hybridlimit.Limit{Rate: 100, Period: time.Second, Burst: 100}
	share := hybridlimit.Limit{Rate: 50, Period: time.Second, Burst: 50} // two instances
	level := func(c local.Core, at int64) int64 {
		r, _ := c.Peek(at, 1)
		return r.Remaining
	}
	for _, tt := range []struct {
		name string
		h    Heard
		at   int64 // when to read the share, ns
		want int64
	}{
		{"never heard of: full", Heard{Limit: limit, Live: 2}, 10 * sec, 50},
		{"half of 60 left, at once", Heard{Synced: true, At: 10 * sec, Remaining: 60, Whole: true, Limit: limit, Live: 2}, 10 * sec, 30},
		{"empty, full in 1 s: nothing yet", Heard{Synced: true, At: 10 * sec, ResetAfter: sec, Whole: true, Limit: limit, Live: 2}, 10 * sec, 0},
		// In debt by 100 (full in 2 s): the share's 50 of it refill at
		// 50/s, a second; then it fills from empty.
		{"in debt: empty a second", Heard{Synced: true, At: 10 * sec, ResetAfter: 2 * sec, Whole: true, Limit: limit, Live: 2}, 11 * sec, 0},
		{"in debt: refilling after", Heard{Synced: true, At: 10 * sec, ResetAfter: 2 * sec, Whole: true, Limit: limit, Live: 2}, 11*sec + sec/5, 10},
	} {
		c, err := SeedShare(nil, share, tt.at, tt.h)
		if err != nil {
			t.Fatal(err)
		}
		if got := level(c, tt.at); got != tt.want {
			t.Errorf("%s: share holds %d, want %d", tt.name, got, tt.want)
		}
	}
	old, _ := local.NewCore(share, 0)
	old.Set(0, 20)
	c, err := SeedShare(&old, hybridlimit.Limit{Rate: 100, Period: 3 * time.Second, Burst: 34}, 0, Heard{})
	if err != nil {
		t.Fatal(err)
	}
	if got := level(c, 0); got != 20 {
		t.Errorf("a new share from an old one holds %d, want the old one's 20", got)
	}
}
