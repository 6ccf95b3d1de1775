package sim

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// admitAll is a contender that admits every request, one call each.
type admitAll struct {
	calls  atomic.Int64
	closed atomic.Bool
	inst   int
}

func (a *admitAll) Allow(_ context.Context, inst int, _ string) (bool, error) {
	if inst < 0 || inst >= a.inst {
		return false, errors.New("instance out of range")
	}
	a.calls.Add(1)
	return true, nil
}

func (a *admitAll) Calls(context.Context) (int64, error) { return a.calls.Load(), nil }
func (a *admitAll) Close() error                         { a.closed.Store(true); return nil }

// stuck is an admitAll whose instances do not stop.
type stuck struct{ admitAll }

func (*stuck) Close() error { return errors.New("an instance did not stop") }

func TestLiveContender(t *testing.T) {
	s := redistest.StandaloneServer(t)
	cfg := liveConfig()
	cfg.Strategies = []Strategy{Exact}
	var run *admitAll
	c := Contender{Name: "admit-all", Start: func(_ context.Context, sc Scenario) (ContenderRun, error) {
		run = &admitAll{inst: sc.Instances}
		return run, nil
	}}
	rep, err := RunLive(context.Background(), cfg, LiveTarget{Addr: s.Addr, Workers: 2, Contenders: []Contender{c}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[1].Strategy != "admit-all" {
		t.Fatalf("results %v, want exact then admit-all", rep.Results)
	}
	if !run.closed.Load() {
		t.Error("the contender's run was not closed")
	}
	r := rep.Results[1]
	if r.Decisions == 0 || r.Admitted != r.Decisions || r.Calls != r.Decisions || r.SyncIntervalMS != nil {
		t.Errorf("admit-all: %d decisions, %d admitted, %d calls, interval %v; want all admitted, one call each, no interval",
			r.Decisions, r.Admitted, r.Calls, r.SyncIntervalMS)
	}
	// The workers ask as fast as they can, far above the limit on the
	// hottest key: admitting all of it goes above B + r d.
	if r.OvershootRatio <= 0 || r.DecisionP99NS == nil {
		t.Errorf("admit-all: overshoot %v, p99 %v", r.OvershootRatio, r.DecisionP99NS)
	}
	if r.MostOverBound <= 0 {
		t.Errorf("admit-all: most over the bound %v, want above 0", r.MostOverBound)
	}
	if exact := rep.Results[0]; exact.MostOverBound > 0 || exact.Calls != 0 {
		t.Errorf("exact: %v above the bound, %d contender calls; want none", exact.MostOverBound, exact.Calls)
	}
}

func TestLiveContenderErrors(t *testing.T) {
	s := redistest.StandaloneServer(t)
	cfg := liveConfig()
	cfg.Strategies = []Strategy{Local}
	start := func(context.Context, Scenario) (ContenderRun, error) { return &admitAll{inst: 4}, nil }
	for name, cs := range map[string][]Contender{
		"no name":         {{Start: start}},
		"no start":        {{Name: "x"}},
		"strategy's name": {{Name: "exact", Start: start}},
		"twice":           {{Name: "x", Start: start}, {Name: "x", Start: start}},
		"start fails": {{Name: "x", Start: func(context.Context, Scenario) (ContenderRun, error) {
			return nil, errors.New("no daemon")
		}}},
		"close fails": {{Name: "x", Start: func(context.Context, Scenario) (ContenderRun, error) {
			return &stuck{admitAll{inst: 4}}, nil
		}}},
	} {
		rep, err := RunLive(context.Background(), cfg, LiveTarget{Addr: s.Addr, Workers: 2, Contenders: cs})
		if err == nil {
			t.Errorf("%s: RunLive succeeded: %v", name, rep.Results)
		} else if !strings.HasPrefix(err.Error(), "sim: ") {
			t.Errorf("%s: error %q, want it to say sim", name, err)
		}
	}
}
