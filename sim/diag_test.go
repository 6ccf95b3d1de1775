package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// TestWriteDiag checks what -diag prints of a run with Config.Detail (the
// hybrid limiter's counters, commands by phase and by class of demand,
// messages by kind, the worst keys) and of one without.
func TestWriteDiag(t *testing.T) {
	ms := 200.0
	r := Result{
		Strategy:       Reserve,
		SyncIntervalMS: &ms,
		Diag: Diagnostics{
			Rounds: 4, Fetches: 1, Messages: 9, ScriptCalls: 4, Waits: 2, DeniedRemote: 3, DeniedLocal: 5,
			byPhase:     [phases]int64{6, 4, 1},
			keyCommands: map[string][phases]int64{"sim:{s1.0}:h:k0": {3, 4, 0}},
			keyMessages: map[string]msgCounts{"sim:{s1.0}:h:k0": {phaseRound: {msgGrant: 2, msgReturn: 1}}},
		},
		perKey: []keyCount{{Key: 0, Demand: 500, Admitted: 210, Oracle: 200}, {Key: 1, Demand: 50, Admitted: 45, Oracle: 50}},
	}
	r.Diag.classes = breakdown(r, hybridlimit.PerSecond(100), 2*time.Second) // the limit adds 200 tokens
	rep := &Report{Results: []Result{r, {Strategy: Local}}}
	var b strings.Builder
	if err := rep.WriteDiag(&b); err != nil {
		t.Fatal(err)
	}
	const want = `
== reserve 200ms
   commands: decision 6, round 4, presence 1
   limiter: rounds 4, fetches 1, messages 9, script calls 4, waits 2, denied remote 3, denied local 5, evictions 0
   failure policy: fallback allowed 0, fallback denied 0, breaker opens 0, round errors 0
   keys by demand     keys    demand  admitted    oracle  msgs:decide   msgs:round   msgs/req
   over the limit        1       500       210       200            3            4      0.014
   10-100% of it         1        50        45        50            0            0      0.000
   1-10% of it           0         0         0         0            0            0      0.000
   under 1% of it        0         0         0         0            0            0      0.000
   sync messages       decision:grant decision:refused  decision:return decision:restate  decision:report      round:grant    round:refused     round:return    round:restate     round:report
   over the limit                   0                0                0                0                0                2                0                1                0                0
   10-100% of it                    0                0                0                0                0                0                0                0                0                0
   1-10% of it                      0                0                0                0                0                0                0                0                0                0
   under 1% of it                   0                0                0                0                0                0                0                0                0                0
   all                              0                0                0                0                0                2                0                1                0                0
   most over-admitted keys (key demand admitted oracle): k0 500 210 200;
   most under-admitted keys (key demand admitted oracle): k1 50 45 50;

== local
   commands: decision 0, round 0, presence 0
`
	if got := b.String(); got != want {
		t.Errorf("WriteDiag wrote\n%s\nwant\n%s", got, want)
	}
}

// TestWriteDiagNodes checks the nodes -diag prints for each run and what
// splitting did against the same stream whole.
func TestWriteDiagNodes(t *testing.T) {
	ms := 200.0
	cpu := []float64{2e6, 3e6, 4e6}
	whole := Result{Strategy: Reserve, SyncIntervalMS: &ms,
		Nodes: []NodeLoad{{KeyMessages: 10, Calls: 8, RedisCPUNS: &cpu[0]}, {KeyMessages: 40, Calls: 20, RedisCPUNS: &cpu[2]}},
		Diag:  Diagnostics{keyNodes: map[int][]int64{0: {0, 30}, 1: {6, 0}}}}
	split := Result{Strategy: ReserveSharded, SyncIntervalMS: &ms,
		Nodes: []NodeLoad{{KeyMessages: 25, Calls: 15, RedisCPUNS: &cpu[1]}, {KeyMessages: 30, Calls: 16, RedisCPUNS: &cpu[1]}},
		Diag:  Diagnostics{keyNodes: map[int][]int64{0: {12, 15}, 1: {6, 0}}}}
	rep := &Report{Results: []Result{whole, split}}
	var b strings.Builder
	if err := rep.WriteDiag(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"   nodes: key messages 10 40, calls 8 20, redis cpu 2ms 4ms; hottest key k0's messages 0 30\n",
		"   nodes: key messages 25 30, calls 15 16, redis cpu 3ms 3ms; hottest key k0's messages 12 15\n",
		"\n== reserve-sharded 200ms against reserve 200ms\n" +
			"   busiest node: key messages 30 against 40 (0.75), calls 16 against 20 (0.80), redis cpu 3ms against 4ms (0.75)\n" +
			"   hottest key k0 on its busiest node: key messages 15 against 30 (0.50)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteDiag wrote\n%s\nwithout\n%s", b.String(), want)
		}
	}
}

// TestSplitUnloadsHotKeysNode runs a hot key over its limit, whole and
// split, in virtual time on the modelled cluster (k0 is asked about 4,800
// times a second against 200, enough messages for the strategy to find it
// hot within its first seconds): split, the node that
// runs the most of its messages must run at most two thirds of what the
// whole key cost its one node (the run includes the second or so before
// the key is found hot and split). The parts are one a master, each
// asked by its own instances a message a round and by the others a
// fall-over every four intervals; each part asked by every instance every
// round put as much on a master as the whole key did.
func TestSplitUnloadsHotKeysNode(t *testing.T) {
	t.Parallel()
	sc := Scenario{Workload: Hotspot, Instances: 12, Keys: 50, Duration: 6 * time.Second, Rate: 8000,
		Limit: hybridlimit.PerSecond(200), ZipfS: 2, Seed: 1}
	rep, err := RunVirtual(context.Background(), Config{Scenario: sc, Strategies: []Strategy{Reserve, ReserveSharded},
		Intervals: []time.Duration{200 * time.Millisecond}, RTT: DefaultRTT, Detail: true})
	if err != nil {
		t.Fatal(err)
	}
	e, ok := SplitEffectOf(rep.Results[0], rep.Results[1])
	if !ok || e.HotKey < 0 {
		t.Fatalf("no split effect: %+v, %v", e, ok)
	}
	t.Logf("hottest key %s on its busiest node: %d key messages split, %d whole (%.2f); busiest node %+v split, %+v whole",
		keyName(e.HotKey), e.HotKeySplit, e.HotKeyWhole, ratio(e.HotKeySplit, e.HotKeyWhole), e.Split, e.Whole)
	if e.HotKey != 0 || rep.Results[1].Diag.keyNodes[0][0] == 0 {
		t.Fatalf("hottest key %s, its messages by node split %v: want k0, split", keyName(e.HotKey), rep.Results[1].Diag.keyNodes[0])
	}
	if 3*e.HotKeySplit > 2*e.HotKeyWhole {
		t.Errorf("hottest key split: %d key messages on its busiest node, whole %d: want at most two thirds", e.HotKeySplit, e.HotKeyWhole)
	}
}
