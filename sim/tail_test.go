package sim

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunTail spreads one stream (1000 requests a second from four
// instances) over 2 keys and over 1000: an instance sees a key 25 times
// an interval, then a twentieth of a time. Reserve's key messages per
// decision must rise from well under the exact limiter's one to most of
// it, exact's stay about one a decision, and the table must say how often an
// instance sees a key.
func TestRunTail(t *testing.T) {
	cfg := smallConfig()
	cfg.Scenario = small(Uniform)
	cfg.Scenario.Limit.Rate, cfg.Scenario.Limit.Burst = 10, 10
	cfg.Strategies = []Strategy{Exact, Reserve}
	cfg.Intervals = []time.Duration{200 * time.Millisecond}
	tails, err := RunTail(context.Background(), cfg, []int{2, 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(tails) != 2 || tails[0].Keys != 2 || tails[1].Keys != 1000 {
		t.Fatalf("got %+v, want key counts 2 and 1000", tails)
	}
	var perDecision [2]float64
	for i, tl := range tails {
		if tl.Report == nil || len(tl.Report.Results) != 2 {
			t.Fatalf("%d keys: want two results, got %+v", tl.Keys, tl.Report)
		}
		exact, reserve := tl.Report.Results[0], tl.Report.Results[1]
		if exact.KeyMessages != exact.RedisCmds || exact.KeyMessages < exact.Decisions {
			t.Errorf("%d keys: exact ran %d key messages in %d commands for %d decisions, want one a command, at least one a decision",
				tl.Keys, exact.KeyMessages, exact.RedisCmds, exact.Decisions)
		}
		if want := 1000 / float64(tl.Keys) / 4 * 0.2; tl.PerInterval(reserve) != want || tl.PerInterval(exact) != 0 {
			t.Errorf("%d keys: %v and %v decisions a key, instance and interval, want %v (reserve) and 0 (exact)",
				tl.Keys, tl.PerInterval(reserve), tl.PerInterval(exact), want)
		}
		perDecision[i] = float64(reserve.KeyMessages) / float64(reserve.Decisions)
	}
	if perDecision[0] > 0.2 || perDecision[1] < 0.5 {
		t.Errorf("reserve key messages a decision: %.4f over 2 keys, %.4f over 1000; want under 0.2, then over 0.5",
			perDecision[0], perDecision[1])
	}
	t.Logf("reserve key messages a decision: %.4f over 2 keys, %.4f over 1000", perDecision[0], perDecision[1])
	var out bytes.Buffer
	if err := WriteTailTable(&out, tails); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "per key, instance, interval") || !strings.Contains(out.String(), "0.05") {
		t.Errorf("the table does not say how often an instance sees a key:\n%s", out.String())
	}
}

func TestParseKeyCounts(t *testing.T) {
	got, err := ParseKeyCounts("20, 2000,100000")
	if err != nil || len(got) != 3 || got[0] != 20 || got[2] != 100000 {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-5", "1.5", "10,,20", "x"} {
		if _, err := ParseKeyCounts(bad); err == nil {
			t.Errorf("ParseKeyCounts(%q) took it", bad)
		}
	}
}

// TestTailReserveNeverAboveOne spreads 1000 requests a second from four
// instances over 5000 keys for 30 s under a limit leased ahead of demand
// (100 a second: 5 tokens an instance and interval): an instance sees a
// key about once in 20 s, so most decisions fetch, and the lease each
// fetch brings goes idle past the idle hold. Reserve must send at most
// one key message a decision, as the exact limiter sends one script; its
// presence calls, one an instance and interval, are counted apart.
func TestTailReserveNeverAboveOne(t *testing.T) {
	cfg := smallConfig()
	cfg.Scenario = small(Uniform)
	cfg.Scenario.Duration = 30 * time.Second
	cfg.Strategies = []Strategy{Reserve}
	cfg.Intervals = []time.Duration{200 * time.Millisecond}
	tails, err := RunTail(context.Background(), cfg, []int{5000})
	if err != nil {
		t.Fatal(err)
	}
	r := tails[0].Report.Results[0]
	per := float64(r.KeyMessages) / float64(r.Decisions)
	t.Logf("%d decisions: %d key messages (%.4f a decision), %d presence calls", r.Decisions, r.KeyMessages, per, r.PresenceCalls)
	if per > 1 {
		t.Errorf("reserve sent %.4f key messages a decision on the long tail, want at most 1", per)
	}
	if want := int64(4 * 30 / 0.2); r.PresenceCalls < want*9/10 || r.PresenceCalls > want*11/10 {
		t.Errorf("%d presence calls, want about %d: one an instance and interval", r.PresenceCalls, want)
	}
}
