package gubernator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/sim"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestSideBySide runs the hotspot scenario (2,000 keys, Zipf 1.1, 100/s
// and a burst of 100 a key) on four instances for 10 s (2 s with -short)
// a limiter: the exact limiter, the hybrid limiter in both modes at
// Gubernator's sync interval (100 ms) and at its own default (250 ms), and
// four Gubernator daemons, each run's workers asking as fast as they can.
// It logs what each admitted against the oracle and B + r T, how fast,
// and the network calls a decision took, and writes the report as JSON to
// $HYBRIDLIMIT_SIDE_BY_SIDE_JSON if set. It checks only that each ran: the
// figures are for the results page, not goals a test asserts.
func TestSideBySide(t *testing.T) {
	s := redistest.Start(t)
	sc := sim.DefaultScenario(sim.Hotspot)
	sc.Instances, sc.Duration = 4, 10*time.Second
	if testing.Short() {
		sc.Duration = 2 * time.Second
	}
	cfg := sim.Config{
		Scenario:   sc,
		Strategies: []sim.Strategy{sim.Exact, sim.Optimistic, sim.Reserve},
		Intervals:  []time.Duration{100 * time.Millisecond, 250 * time.Millisecond},
	}
	rep, err := sim.RunLive(context.Background(), cfg, sim.LiveTarget{Addr: s.Addr, Contenders: Contenders()})
	if err != nil {
		t.Fatal(err)
	}
	contender := map[sim.Strategy]bool{}
	for _, c := range Contenders() {
		contender[sim.Strategy(c.Name)] = true
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "limiter\tsync\tdecisions/s\tp50\tp99\tovershoot\tworst window\tmost over B+rT\tcalls/decision\tredis cpu/decision\t")
	for _, r := range rep.Results {
		sync := "-"
		if r.SyncIntervalMS != nil {
			sync = (time.Duration(*r.SyncIntervalMS) * time.Millisecond).String()
		}
		if r.Decisions == 0 || r.DecisionsPerSec == nil || r.DecisionP99NS == nil || r.RedisCPUPerDecisionNS == nil {
			t.Fatalf("%s: no decisions or no live figures: %+v", r.Label(), r)
		}
		calls, cpu := r.RedisCmdsPerDecision, time.Duration(*r.RedisCPUPerDecisionNS).Round(time.Nanosecond).String()
		if contender[r.Strategy] {
			// Each decision is a caller's call at least.
			if r.Calls < r.Decisions {
				t.Errorf("%s: %d calls for %d decisions", r.Strategy, r.Calls, r.Decisions)
			}
			calls, cpu = float64(r.Calls)/float64(r.Decisions), "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%v\t%v\t%.2f%%\t%.2f%%\t%.0f\t%.4f\t%s\t\n",
			r.Strategy, sync, *r.DecisionsPerSec,
			time.Duration(*r.DecisionP50NS).Round(time.Microsecond/10), time.Duration(*r.DecisionP99NS).Round(time.Microsecond/10),
			100*r.OvershootRatio, 100*r.WorstWindowOvershootRatio, r.MostOverBound, calls, cpu)
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d instances, hotspot, %v a run:\n%s", sc.Instances, sc.Duration, b.String())
	// make results reads the report from here.
	if path := os.Getenv("HYBRIDLIMIT_SIDE_BY_SIDE_JSON"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(rep.WriteJSON(f), f.Close()); err != nil {
			t.Fatal(err)
		}
	}
}
