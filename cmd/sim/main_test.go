package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/sim"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// runSim runs the command with args and returns its status and output.
func runSim(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// tiny makes a run fast: a few hundred requests.
var tiny = []string{"-duration", "500ms", "-instances", "2", "-keys", "20", "-rate", "600"}

func TestRunBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-bogus"}, "flag provided but not defined"},
		{[]string{"-instances", "many"}, "invalid value"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-scenario", "zigzag"}, "unknown scenario"},
		{[]string{"-strategies", "exact,fast"}, `unknown strategy "fast"`},
		{[]string{"-strategies", "reserve-sharded,reserve-sharded"}, "listed twice"},
		{[]string{"-sync", "50ms,soon"}, "-sync"},
		{[]string{"-durable", "1"}, "need -live"},
		{[]string{"-max-wait", "1s"}, "need -live"},
		{[]string{"-live", "-redis", "a:1", "-max-wait", "-1s"}, "-max-wait -1s is negative"},
		{[]string{"-sync", "0s"}, "outside [1ms, 1m]"},
		{[]string{"-instances", "0"}, "instances 0"},
		{[]string{"-duration", "-1s"}, "duration"},
		{[]string{"-zipf", "0.9"}, "zipf"},
		{[]string{"-limit", "0"}, "rate 0"},
		{[]string{"-rtt", "-1ms"}, "-rtt"},
		{[]string{"-redis", "127.0.0.1:6379"}, "need -live"},
		{[]string{"-live"}, "-live needs -redis"},
		{[]string{"-live", "-redis", "a:1", "-cluster", "b:1"}, "not both"},
		{[]string{"-live", "-redis", "a:1", "-rtt", "2ms"}, "-rtt is for virtual mode"},
		{[]string{"-live", "-cluster", ","}, "-cluster"},
		{[]string{"-live", "-cluster", " , "}, "-cluster"},
		// go-redis panicked on the pool size these make (above MaxInt32).
		{[]string{"-live", "-redis", "127.0.0.1:1", "-strategies", "exact", "-workers", "300000000"}, "-workers 300000000 is outside [1, 4096]"},
		{[]string{"-live", "-redis", "127.0.0.1:1", "-workers", "0"}, "-workers 0 is outside [1, 4096]"},
		{[]string{"-live", "-redis", "127.0.0.1:1", "-workers", "-1"}, "-workers -1 is outside [1, 4096]"},
		{[]string{"-live", "-redis", "127.0.0.1:1", "-workers", "4096", "-instances", "1024"}, "-workers 4096 x -instances 1024"},
		{[]string{"-tail", "20,0"}, `-tail: key count "0"`},
		{[]string{"-tail", "20", "-keys", "5"}, "not with -scale, -keys"},
		{[]string{"-tail", "20", "-scale", "1,10"}, "not with -scale, -keys"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runSim(t, tt.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, tt.want) {
			t.Errorf("sim %v = %d, stdout %q, stderr %q; want 2 and %q", tt.args, code, stdout, stderr, tt.want)
		}
	}
}

func TestRunHelp(t *testing.T) {
	code, _, stderr := runSim(t, "-h")
	if code != 0 || !strings.Contains(stderr, "-strategies") {
		t.Errorf("sim -h = %d, %q", code, stderr)
	}
}

func TestRunTable(t *testing.T) {
	code, stdout, stderr := runSim(t, append(tiny, "-strategies", "local,reserve", "-sync", "100ms")...)
	if code != 0 {
		t.Fatalf("sim = %d: %s", code, stderr)
	}
	for _, want := range []string{
		"Scenario hotspot, in virtual time on an embedded Redis modelled as a cluster (round trip 1ms), seed 1:\n",
		"2 instances, 20 keys drawn Zipf s=1.1, 600 requests/s for 500ms, every key 100/s burst 100.\n",
		"strategy", "local", "reserve  100ms", "overshoot",
		"The oracle is one exact token bucket per key", "  worst window   on the worst key", "1s window",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "decisions/s") {
		t.Errorf("a virtual run's legend explains the live columns:\n%s", stdout)
	}
	// Progress is on stderr by default, terminal or not.
	for _, want := range []string{"sim: 2 runs of hotspot", "sim: 2/2 at ", "runs in"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q: %q", want, stderr)
		}
	}
}

// TestRunTableRowsUnchanged checks that the table between the scenario and
// the legend is the report's own table, byte for byte, so that a table
// printed by the command compares with one printed by Report.WriteTable.
func TestRunTableRowsUnchanged(t *testing.T) {
	args := append(tiny, "-strategies", "exact,optimistic", "-sync", "50ms,1s")
	_, table, _ := runSim(t, args...)
	code, js, stderr := runSim(t, append(args, "-json")...)
	if code != 0 {
		t.Fatalf("sim -json = %d: %s", code, stderr)
	}
	var rep sim.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := rep.WriteTable(&want); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "\n\n"+want.String()+"\n") {
		t.Errorf("the command's table:\n%s\nlacks Report.WriteTable's:\n%s", table, want.String())
	}
}

func TestRunQuiet(t *testing.T) {
	code, stdout, stderr := runSim(t, append(tiny, "-strategies", "local", "-q")...)
	if code != 0 || stderr != "" || !strings.Contains(stdout, "local") {
		t.Errorf("sim -q = %d, stdout %q, stderr %q; want 0, a table and nothing on stderr", code, stdout, stderr)
	}
}

func TestRunWritesJSONCSVAndSVG(t *testing.T) {
	dir := t.TempDir()
	csvFile, svgFile := filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.svg")
	args := append(tiny, "-strategies", "exact,optimistic", "-sync", "50ms,1s", "-json", "-csv", csvFile, "-svg", svgFile, "-seed", "3", "-diag")
	code, stdout, stderr := runSim(t, args...)
	if code != 0 {
		t.Fatalf("sim = %d: %s", code, stderr)
	}
	var rep struct {
		Scenario, Mode string
		Seed           uint64
		Results        []map[string]any
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if rep.Scenario != "hotspot" || rep.Mode != "virtual" || rep.Seed != 3 || len(rep.Results) != 3 {
		t.Errorf("report = %+v", rep)
	}
	if r := rep.Results[0]; r["strategy"] != "exact" || r["sync_interval_ms"] != nil || r["decisions_per_sec"] != nil || r["overshoot_ratio"] != 0.0 {
		t.Errorf("exact = %v", r)
	}
	if !strings.Contains(stderr, "== optimistic 1s") {
		t.Errorf("-diag printed no diagnostics: %q", stderr)
	}
	for _, f := range []struct{ path, want string }{{csvFile, "strategy,sync_interval_ms"}, {svgFile, "<svg"}} {
		b, err := os.ReadFile(f.path)
		if err != nil || !strings.HasPrefix(string(b), f.want) {
			t.Errorf("%s = %.40q, %v", f.path, b, err)
		}
	}
	// The same seed writes the same bytes.
	if _, again, _ := runSim(t, args...); again != stdout {
		t.Error("two runs of the same seed wrote different JSON")
	}
}

// TestRunLive runs the live mode against a real server: the table, and no
// warning. A second per strategy, with a max wait of 2s: a fetch that
// outlasts the default 100ms on a machine busy with other tests is the
// failure policy's, and more than 1% of a run's decisions so decided warns.
func TestRunLive(t *testing.T) {
	s := redistest.StandaloneServer(t)
	code, stdout, stderr := runSim(t, "-live", "-redis", s.Addr, "-duration", "1s", "-keys", "50", "-strategies", "exact,reserve", "-sync", "100ms", "-workers", "2", "-max-wait", "2s")
	if code != 0 {
		t.Fatalf("sim -live = %d: %s", code, stderr)
	}
	for _, want := range []string{"decisions/s", "reserve  100ms", "live against the Redis at " + s.Addr, "2 workers per instance",
		"  decisions/s    "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("live table lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stderr, "warning") {
		t.Errorf("a run with Redis answering warned: %s", stderr)
	}
}

// TestRunLiveWarnsOfFallback asks for durable sync to one replica of a
// server that has none: every WAIT times out, the breaker opens and the
// failure policy decides nearly every request. The run printed a normal
// table and nothing, not even -diag, said that no sync succeeded.
func TestRunLiveWarnsOfFallback(t *testing.T) {
	s := redistest.StandaloneServer(t)
	code, stdout, stderr := runSim(t, "-live", "-redis", s.Addr, "-duration", "1s", "-keys", "50", "-strategies", "reserve",
		"-sync", "100ms", "-workers", "2", "-durable", "1", "-diag")
	if code != 0 || !strings.Contains(stdout, "reserve  100ms") {
		t.Fatalf("sim -live -durable 1 = %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	t.Logf("stderr:\n%s", stderr)
	for _, want := range []string{"failure policy: fallback allowed ", "breaker opens ", "round errors ",
		"sim: warning: reserve 100ms: ", "decisions were made by the failure policy", "fewer than 1 replica"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestRunFailsOnUnreachableRedis(t *testing.T) {
	code, _, stderr := runSim(t, "-live", "-redis", "127.0.0.1:1", "-duration", "100ms", "-strategies", "exact")
	if code != 1 || !strings.Contains(stderr, "sim:") {
		t.Errorf("sim against no Redis = %d, %q; want 1", code, stderr)
	}
}

// TestRunFailureSaysSimOnce checks that a failed run's message starts with
// one "sim: ", whether package sim's error already carries it or not.
func TestRunFailureSaysSimOnce(t *testing.T) {
	s := redistest.StandaloneServer(t)
	for name, args := range map[string][]string{
		"unreachable": {"-live", "-redis", "127.0.0.1:1", "-duration", "100ms", "-strategies", "exact"},
		"cancelled":   {"-live", "-redis", s.Addr, "-duration", "5s", "-strategies", "exact"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		cancel()
		if msg := stderr.String(); code != 1 || !strings.HasPrefix(msg, "sim: ") || strings.Contains(msg, "sim: sim:") {
			t.Errorf("%s: sim = %d, %q; want 1 and one \"sim: \"", name, code, msg)
		}
	}
}
