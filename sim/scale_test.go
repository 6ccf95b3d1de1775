package sim

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunScales runs a small scenario at two scales and checks what the
// table is read for: both layouts at each scale, the exact strategy at the
// first scale only, the limit and rate multiplied, the first sights
// counted from the stream, and the key messages beside the commands.
func TestRunScales(t *testing.T) {
	cfg := smallConfig()
	cfg.Strategies = []Strategy{Exact, Reserve}
	cfg.Intervals = []time.Duration{200 * time.Millisecond}
	cfg.Scenario.Duration = 500 * time.Millisecond
	scaled, err := RunScales(context.Background(), cfg, []float64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(scaled) != 2 {
		t.Fatalf("got %d scales, want 2", len(scaled))
	}
	pairs := int64(cfg.Scenario.Keys * cfg.Scenario.Instances)
	for i, s := range scaled {
		if s.Cluster == nil || s.OneServer == nil {
			t.Fatalf("scale %v: a layout has no report", s.Scale)
		}
		wantRows := 2
		if i > 0 {
			wantRows = 1 // reserve only
		}
		if n := len(s.Cluster.Results); n != wantRows {
			t.Errorf("scale %v: %d results, want %d", s.Scale, n, wantRows)
		}
		if want := int64(100 * s.Scale); s.Limit != want {
			t.Errorf("scale %v: limit %d, want %d", s.Scale, s.Limit, want)
		}
		r := s.Cluster.Results[len(s.Cluster.Results)-1]
		if s.FirstSights < 1 || s.FirstSights > min(pairs, r.Decisions) {
			t.Errorf("scale %v: %d first sights, want 1 to %d (instance-key pairs) and at most the %d decisions",
				s.Scale, s.FirstSights, pairs, r.Decisions)
		}
	}
	// Key messages: one a script for exact, which runs one a decision;
	// for Reserve, more than its sync calls (its commands less its
	// presence calls), since a sync call carries several keys.
	for _, r := range scaled[0].Cluster.Results {
		switch {
		case r.Strategy == Exact && (r.KeyMessages != r.RedisCmds || r.KeyMessages < r.Decisions):
			t.Errorf("exact: %d key messages for %d commands and %d decisions, want one a command, at least one a decision",
				r.KeyMessages, r.RedisCmds, r.Decisions)
		case r.Strategy == Reserve && r.KeyMessages <= r.RedisCmds-r.PresenceCalls:
			t.Errorf("reserve: %d key messages for %d commands (%d of them presence calls), want more (a sync call carries several keys)",
				r.KeyMessages, r.RedisCmds, r.PresenceCalls)
		}
	}
	if scaled[1].FirstSights < scaled[0].FirstSights {
		t.Errorf("first sights fell from %d to %d with twice the requests", scaled[0].FirstSights, scaled[1].FirstSights)
	}
	var out bytes.Buffer
	if err := WriteScaleTable(&out, scaled); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "first sights/decision") {
		t.Errorf("the table has no first sights column:\n%s", out.String())
	}
}

// TestFirstSights counts a stream where every instance sees every key.
func TestFirstSights(t *testing.T) {
	sc := small(Uniform) // 2 keys, 4 instances, 1000 requests
	got, err := firstSights(sc)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(sc.Keys * sc.Instances); got != want {
		t.Errorf("got %d first sights, want %d: every instance sees both keys within 1000 requests", got, want)
	}
}
