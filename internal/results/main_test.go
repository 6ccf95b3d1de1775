package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit/sim"
)

const benchOut = `goos: linux
BenchmarkLimiterAllow/striped=true-2         	84521412	        14.20 ns/op	         0 denied/op	       0 B/op	       0 allocs/op
BenchmarkLimiterAllow/striped=true-2         	84521412	        13.00 ns/op	         0 denied/op	       0 B/op	       0 allocs/op
BenchmarkLimiterAllow/striped=true-2         	84521412	        15.00 ns/op	         0 denied/op	       0 B/op	       0 allocs/op
BenchmarkSyncMapBaseline-2   	43141226	        27.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkTableAllow/keys=1e6-2 	 1000000	       400.0 ns/op	        97.60 B/key
PASS
`

func TestParseBench(t *testing.T) {
	got := parseBench(benchOut)
	want := []Bench{
		{"BenchmarkLimiterAllow/striped=true", map[string][]float64{"ns/op": {14.2, 13, 15}, "denied/op": {0, 0, 0}, "B/op": {0, 0, 0}, "allocs/op": {0, 0, 0}}},
		{"BenchmarkSyncMapBaseline", map[string][]float64{"ns/op": {27}, "B/op": {0}, "allocs/op": {0}}},
		{"BenchmarkTableAllow/keys=1e6", map[string][]float64{"ns/op": {400}, "B/key": {97.6}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseBench = %+v, want %+v", got, want)
	}
	m, err := got[0].Median("ns/op")
	if err != nil || m != 14.2 || got[0].Range("ns/op") != "13-15" {
		t.Errorf("median %v, %v, range %q; want 14.2 and 13-15", m, err, got[0].Range("ns/op"))
	}
	if _, err := got[1].Median("cpu-ns/op"); err == nil {
		t.Error("median of a unit not reported: no error")
	}
}

func TestTestLog(t *testing.T) {
	out := `=== RUN   TestFailover
=== RUN   TestFailover/manual
    failover_test.go:91: manual failover (1s to agree): 3 admitted
        over two lines
=== RUN   TestFailover/kill
    failover_test.go:120: SIGKILL: recovered
--- PASS: TestFailover (9.10s)
    --- PASS: TestFailover/manual (3.00s)
    --- PASS: TestFailover/kill (6.00s)
PASS
ok  	github.com/hybridlimit/hybridlimit/global	9.2s
`
	want := `=== RUN   TestFailover
=== RUN   TestFailover/manual
manual failover (1s to agree): 3 admitted
    over two lines
=== RUN   TestFailover/kill
SIGKILL: recovered
--- PASS: TestFailover (9.10s)
    --- PASS: TestFailover/manual (3.00s)
    --- PASS: TestFailover/kill (6.00s)`
	if got := testLog(out); got != want {
		t.Errorf("testLog =\n%s\nwant\n%s", got, want)
	}
}

func TestReplaceBlock(t *testing.T) {
	doc := "a\n<!-- results:headline -->\nold\n<!-- /results:headline -->\nb\n"
	got, err := replaceBlock(doc, "headline", "new\n")
	if want := "a\n<!-- results:headline -->\nnew\n<!-- /results:headline -->\nb\n"; err != nil || got != want {
		t.Errorf("replaceBlock = %q, %v; want %q", got, err, want)
	}
	if _, err := replaceBlock("no markers", "headline", "x"); err == nil {
		t.Error("replaceBlock without markers: no error")
	}
}

func TestReadCSV(t *testing.T) {
	csv := "strategy,sync_interval_ms,instances,decisions,admitted,oracle_admitted,overshoot_ratio,undershoot_ratio,worst_window_overshoot_ratio,redis_cmds,redis_cmds_per_decision,hottest_slot_share,decisions_per_sec,decision_p50_ns,decision_p99_ns\n" +
		"exact,,8,100,70,70,0,0,0,101,1.01,0.1675,,,\n" +
		"reserve,200,8,100,69,70,0,0.0035,0,32,0.32,0.0342,,,\n"
	rep, err := readCSV([]byte(csv))
	if err != nil {
		t.Fatal(err)
	}
	r, err := SimRun{Report: rep}.Row("reserve", "200ms")
	if err != nil || r.Admitted != 69 || r.UndershootRatio != 0.0035 || r.RedisCmdsPerDecision != 0.32 {
		t.Errorf("reserve 200ms = %+v, %v", r, err)
	}
	if r, err := (SimRun{Report: rep}).Row("exact", ""); err != nil || r.RedisCmds != 101 {
		t.Errorf("exact = %+v, %v", r, err)
	}
}

// TestPageRenders renders the page from made-up figures, so that a change
// to the template or the data is checked without the measurements.
func TestPageRenders(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	i := func(x int64) *int64 { return &x }
	res := func(s sim.Strategy, ms float64) sim.Result {
		r := sim.Result{Strategy: s, OvershootRatio: 0.001, RedisCmdsPerDecision: 0.3}
		if s.Synced() {
			r.SyncIntervalMS = f(ms)
		}
		return r
	}
	virtual := SimRun{Cmd: "go run ./cmd/sim", Report: &sim.Report{Results: []sim.Result{
		res(sim.Exact, 0), res(sim.Optimistic, 200), res(sim.Optimistic, 1000), res(sim.Reserve, 50),
		res(sim.Reserve, 100), res(sim.Reserve, 200), res(sim.Reserve, 1000),
	}}, Output: "the table"}
	live := SimRun{Cmd: "go run ./cmd/sim -live", Report: &sim.Report{Mode: "live"}}
	for k, r := range []sim.Result{res(sim.Exact, 0), res(sim.Optimistic, 200), res(sim.Reserve, 200)} {
		r.DecisionsPerSec, r.DecisionP50NS, r.DecisionP99NS = f(2.5e6), i(400), i(1200)
		r.RedisCPUPerDecisionNS = f([]float64{45600, 7000, 293}[k])
		r.Decisions, r.KeyMessages = 10000, []int64{10000, 300, 100}[k]
		r.Instances, r.RedisCmds, r.PresenceCalls = 8, []int64{10000, 150, 50}[k], []int64{0, 10, 10}[k]
		live.Report.Results = append(live.Report.Results, r)
	}
	peer := SimRun{Cmd: "go -C bench/gubernator test", Report: &sim.Report{Mode: "live"}, Output: "the side-by-side table"}
	for k, name := range []sim.Strategy{sim.Reserve, "gubernator-leaky", "gubernator-token"} {
		r := res(name, 250)
		r.DecisionsPerSec, r.MostOverBound = f([]float64{2.26e6, 15577, 19024}[k]), []float64{0, 2624, 144}[k]
		peer.Report.Results = append(peer.Report.Results, r)
	}
	scale := ScaleRun{Cmd: "go run ./cmd/sim -scale 1,100"}
	for k, f := range []float64{1, 100} {
		rep := func(cmds int64) *sim.Report {
			r := res(sim.Reserve, 200)
			r.RedisCmds, r.FetchCmds, r.RedisCmdsPerDecision = cmds, cmds/2, float64(cmds)/(48000*f)
			r.Decisions = int64(48000 * f)
			return &sim.Report{Results: []sim.Result{r}}
		}
		scale.Scaled = append(scale.Scaled, sim.Scaled{Scale: f, Rate: 6000 * f, Limit: 100 * int64(f),
			FirstSights: 8000, Cluster: rep(12000 - 1000*int64(k)), OneServer: rep(6000)})
	}
	tail := TailRun{Cmd: "go run ./cmd/sim -tail 20,2000"}
	for _, k := range []int{20, 2000} {
		r := res(sim.Reserve, 200)
		r.Decisions, r.KeyMessages, r.PresenceCalls, r.RedisCmdsPerDecision = 1000, 100*int64(k/20), 2, 0.5
		tail.Tails = append(tail.Tails, sim.Tail{Keys: k, Instances: 8, Rate: 20000, FirstSights: 10, Report: &sim.Report{Results: []sim.Result{r}}})
	}
	benches := BenchRun{Cmd: "go test -bench 'A|B'", Results: parseBench(benchOut + `
BenchmarkBucketAllow/admit=all-2 	1000	30 ns/op
BenchmarkXTimeRateAllow/admit=all-2 	1000	100 ns/op
`)}
	scripts := BenchRun{Cmd: "go test -bench SyncScript", Results: parseBench(`
BenchmarkSyncScript/message/keys=256-2 	100	1000 ns/op	12.5 redis-cpu-us/key
BenchmarkSyncScript/floor/keys=256-2 	100	1000 ns/op	5 redis-cpu-us/key
BenchmarkSyncScript/wire/keys=256-2 	100	1000 ns/op	6.5 redis-cpu-us/key
BenchmarkSyncScript/paired/keys=256-2 	100	1000 ns/op	5 floor-cpu-us/key	1.9 stretchless-x-floor	1.3 wire-x-floor	2.5 x-floor
`)}
	d := &data{
		Machine: Machine{CPUModel: "a CPU", NumCPU: 2, Valkey: "8.0.1"},
		Default: virtual, Long: virtual, Standalone: virtual, Flash: virtual, Uniform: virtual,
		HighRate: virtual, HighRateSA: virtual, Diag: virtual, LiveOne: live, LiveEight: live,
		LiveTail: live, LiveTailBusy: live, TailKeys: 100000, BusyWorkers: 16,
		Tests:   []TestRun{{Title: "a test", Cmd: "go test", Log: "--- PASS: TestX (1s)"}},
		HotPath: benches, DenyEmpty: benches, LocalBucket: benches, LocalTable: benches, Steady: benches,
		SyncRound: benches, RedisMem: benches, Scale: scale, ScaleTick: scale, Tail: tail,
		ScriptRedis: scripts, ScriptValkey: scripts, Peer: peer,
	}
	var page, head bytes.Buffer
	if err := pageTmpl.Execute(&page, d); err != nil {
		t.Fatal(err)
	}
	if err := pageTmpl.ExecuteTemplate(&head, "headline", d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| CPU | a CPU, 2 logical CPUs |",
		"| hybrid decision with local allowance, one hot key, 2 goroutines | 14.2 ns, 0 allocs",
		"`go test -bench 'A\\|B'` |", // a pipe in a table cell is escaped
		"Reserve 2.50M, exact 2.50M (1.0x)",
		"(50ms and 100ms here)",
		"| LimiterAllow/striped=true | 3 | 14.2 (13-15) |",
		"| x100 | 600000 | 10000 | reserve 200ms | 0.10% | 0.00% | 0.00% | 0.0023 | 50.00% | 0.0013 | 0.0017 |",
		"| 0.3000 | 0.01 | 293ns | 29.3µs |", // key messages and Redis CPU per decision and per message
		"| 0.3000 | 1 | 45.6µs | 45.6µs |",
		"from 12000 to 11000 as a\ncluster",
		"293ns against 45.6µs (1/156)",
		"| 2000 | 0.25 | reserve 200ms | 0.10% | 0.00% | 10.0000 | 0.0020 | 0.5000 | 0.0100 |", // the long tail
		"Valkey 8.0.1: a message costs 2.50x its floor, 256 a call (2.50x run\napart).",
		"Of the\n7.5 µs it costs above the floor, 1.5 µs is reading and writing the formats",
		"and 6 µs the script's logic",
		"Reserve 0, Gubernator 2624 (leaky bucket), 144 (token bucket); decisions a second 2.26M against 15.6k, each of Gubernator's a gRPC call",
		"```text\nthe side-by-side table\n```",
		"An instance makes 0.62 decisions of a key a sync interval", // the long tail live
		"a call carried 2.5 key messages.",
		"Reserve's Redis CPU a decision was\n0.01x exact's",
	} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %q:\n%s", want, page.String())
		}
	}
	if !strings.Contains(page.String(), head.String()) {
		t.Errorf("the page does not hold the headline:\n%s", head.String())
	}
}
