package sim

import (
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
