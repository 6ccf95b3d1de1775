package sim

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// smallConfig is a report small enough for tests under the race detector:
// about a thousand requests, every strategy, two intervals.
func smallConfig() Config {
	return Config{
		Scenario:   small(Hotspot),
		Strategies: Strategies(),
		Intervals:  []time.Duration{50 * time.Millisecond, 200 * time.Millisecond},
		RTT:        DefaultRTT,
	}
}

// TestVirtual runs a small report twice, checks that the JSON is the same
// byte for byte, and checks each strategy's result for sense. (Exact, one
// script per request, is the costliest to run and has its own test.)
func TestVirtual(t *testing.T) {
	cfg := smallConfig()
	cfg.Strategies = []Strategy{Local, Optimistic, Reserve}
	var out [2]bytes.Buffer
	var rep *Report
	for i := range out {
		cfg.Parallel = i + 1 // the report must not depend on it either
		var err error
		rep, err = RunVirtual(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteJSON(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Errorf("two runs of the same seed differ:\n%s\n---\n%s", out[0].Bytes(), out[1].Bytes())
	}
	if len(rep.Results) != 5 { // local, and two intervals of two hybrids
		t.Fatalf("%d results, want 5", len(rep.Results))
	}
	for _, r := range rep.Results {
		t.Logf("%-16s over %.4f under %.4f worst %.4f cmds/decision %.4f by phase %v diag %+v", r.Label(), r.OvershootRatio, r.UndershootRatio,
			r.WorstWindowOvershootRatio, r.RedisCmdsPerDecision, r.Diag.byPhase, r.Diag)
		if r.Decisions != rep.Results[0].Decisions || r.OracleAdmitted != rep.Results[0].OracleAdmitted {
			t.Errorf("%s: %d decisions, oracle %d; every strategy must see the same stream", r.Label(), r.Decisions, r.OracleAdmitted)
		}
		if r.DecisionsPerSec != nil || r.DecisionP50NS != nil || r.DecisionP99NS != nil {
			t.Errorf("%s: live-only fields set in virtual mode", r.Label())
		}
		switch r.Strategy {
		case Local:
			if r.RedisCmds != 0 {
				t.Errorf("local sent %d Redis commands", r.RedisCmds)
			}
		case Reserve:
			if r.Diag.FallbackAllowed != 0 {
				t.Errorf("%s: fallback allowed %d; want 0", r.Label(), r.Diag.FallbackAllowed)
			}
			fallthrough
		case Optimistic:
			if r.RedisCmds == 0 || r.Diag.byPhase[phasePresence] == 0 {
				t.Errorf("%s: commands by phase %v: want some, presence included", r.Label(), r.Diag.byPhase)
			}
		}
	}
}

// TestVirtualExactMatchesOracle is the oracle's self-check: the exact
// strategy (one global/ Lua script per request, on miniredis) and the
// oracle (local.Core per key) must make the same decisions.
func TestVirtualExactMatchesOracle(t *testing.T) {
	t.Parallel()
	for _, w := range Workloads() {
		cfg := Config{Scenario: small(w), Strategies: []Strategy{Exact}}
		rep, err := RunVirtual(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := rep.Results[0]
		t.Logf("%s: %d decisions, %d admitted, oracle %d", w, r.Decisions, r.Admitted, r.OracleAdmitted)
		if r.Admitted != r.OracleAdmitted || r.OvershootRatio != 0 || r.UndershootRatio != 0 || r.WorstWindowOvershootRatio != 0 {
			t.Errorf("%s: exact admitted %d (over %v, under %v, worst window %v), oracle %d; want identical",
				w, r.Admitted, r.OvershootRatio, r.UndershootRatio, r.WorstWindowOvershootRatio, r.OracleAdmitted)
		}
		if r.RedisCmdsPerDecision < 1 {
			t.Errorf("%s: exact sent %v commands per decision, want at least 1", w, r.RedisCmdsPerDecision)
		}
		if r.Admitted == r.Decisions {
			t.Errorf("%s: every request admitted: the scenario does not test the limit", w)
		}
	}
}

// TestVirtualZeroRTT checks that an RTT of 0 models replies that arrive at
// once, not the 1ms round trip cmd/sim defaults to.
func TestVirtualZeroRTT(t *testing.T) {
	cfg := smallConfig()
	cfg.Strategies = []Strategy{Reserve}
	var out [2]bytes.Buffer
	for i, rtt := range []time.Duration{0, DefaultRTT} {
		cfg.RTT = rtt
		rep, err := RunVirtual(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteJSON(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	if bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Errorf("RTT 0 and RTT %v give the same report:\n%s", DefaultRTT, out[0].Bytes())
	}
}

func TestVirtualRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no strategy":              {Scenario: small(Hotspot)},
		"hybrid without intervals": {Scenario: small(Hotspot), Strategies: []Strategy{Reserve}},
		"bad scenario":             {Scenario: Scenario{}, Strategies: []Strategy{Local}},
		"negative rtt":             {Scenario: small(Hotspot), Strategies: []Strategy{Local}, RTT: -time.Second},
	} {
		if _, err := RunVirtual(context.Background(), cfg); err == nil {
			t.Errorf("%s: RunVirtual succeeded", name)
		}
	}
}

func TestVirtualStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunVirtual(ctx, smallConfig()); err == nil {
		t.Error("RunVirtual with a cancelled context succeeded")
	}
}

// TestLocalSharesSumToBurst spreads a burst evenly: each of 8 instances
// asks for ceil(B/8) tokens of one key at t=0. The local strategy claims
// that each instance enforces limit/N, so together they may admit at most
// B, and since every instance asks for at least its share, exactly B.
func TestLocalSharesSumToBurst(t *testing.T) {
	const n = 8
	for _, b := range []int64{1, 3, 7, 8, 9, 100} {
		sc := small(Uniform)
		sc.Instances, sc.Keys, sc.Limit = n, 1, hybridlimit.PerSecond(100).WithBurst(b)
		var reqs []request
		for inst := range n {
			for range (b + n - 1) / n {
				reqs = append(reqs, request{At: 0, Key: 0, Inst: int32(inst)})
			}
		}
		s := &simulation{sc: sc, reqs: reqs}
		admitted := make([]bool, len(reqs))
		if err := s.runLocal(admitted); err != nil {
			t.Fatalf("burst %d: %v", b, err)
		}
		var got int64
		for _, ok := range admitted {
			if ok {
				got++
			}
		}
		if got != b {
			t.Errorf("burst %d over %d instances, %d requests at t=0 each: local admitted %d, want %d", b, n, (b+n-1)/n, got, b)
		}
	}
}
