// Command results runs the measurements that docs/results.md reports and
// writes that file, the simulator's chart docs/sim-hotspot.svg, and the
// headline table of README.md (between its "results:headline" markers).
// Every figure is read from the output of a command it ran, shown beside
// the figure; the machine the figures came from is read when it runs.
//
//	make results                 # go run ./internal/results
//
// It runs the simulator (virtual and live), a few tests on a real Redis
// Cluster and the benchmarks of the request path: several minutes, both
// cores. A quiet machine gives steadier figures. It starts a redis-server
// on a free loopback port for the live runs and stops it; the tests and
// benchmarks start their own. It must run from the module's root.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/sim"
)

func main() {
	out := flag.String("out", "docs/results.md", "the results file to write")
	readme := flag.String("readme", "README.md", "the README whose headline table to rewrite")
	svg := flag.String("svg", "docs/sim-hotspot.svg", "the chart of the default simulator run")
	save := flag.String("save", "", "also write the measured figures as JSON to `FILE`")
	from := flag.String("from", "", "write the pages from the figures -save wrote to `FILE`, measuring nothing")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, *out, *readme, *svg, *save, *from)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, readme, svg, save, from string) error {
	d, err := figures(ctx, svg, from)
	if err != nil {
		return err
	}
	if save != "" {
		b, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(save, b, 0o644); err != nil {
			return err
		}
	}
	var page bytes.Buffer
	if err := pageTmpl.Execute(&page, d); err != nil {
		return err
	}
	var head bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&head, "headline", d); err != nil {
		return err
	}
	old, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	updated, err := replaceBlock(string(old), "headline", head.String())
	if err != nil {
		return fmt.Errorf("%s: %w", readme, err)
	}
	if err := os.WriteFile(out, page.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(readme, []byte(updated), 0o644); err != nil {
		return err
	}
	var failed []string
	for _, t := range d.Tests {
		if t.Failed {
			failed = append(failed, t.Cmd)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s written, with these tests failing (their logs are on it): %s", out, strings.Join(failed, "; "))
	}
	return nil
}

// figures measures, or reads the figures an earlier run saved in from.
func figures(ctx context.Context, svg, from string) (*data, error) {
	if from != "" {
		b, err := os.ReadFile(from)
		if err != nil {
			return nil, err
		}
		d := new(data)
		return d, json.Unmarshal(b, d)
	}
	tmp, err := os.MkdirTemp("", "hybridlimit-results-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	r := &runner{ctx: ctx, tmp: tmp, log: os.Stderr}
	return r.measure(svg)
}

// replaceBlock replaces what lies between the lines <!-- results:name -->
// and <!-- /results:name --> of doc with body.
func replaceBlock(doc, name, body string) (string, error) {
	begin, end := "<!-- results:"+name+" -->\n", "<!-- /results:"+name+" -->"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no block %q ... %q", strings.TrimSpace(begin), end)
	}
	return doc[:i+len(begin)] + body + doc[j:], nil
}

// runner runs the commands, in a temporary directory for what they write.
type runner struct {
	ctx context.Context
	tmp string
	log io.Writer
	sim string // the simulator, built once
}

// exec runs name with args and returns its standard output; standard error
// goes to the log, unless the command fails, when it is in the error.
func (r *runner) exec(env []string, name string, args ...string) (string, error) {
	fmt.Fprintf(r.log, "results: %s %s\n", filepath.Base(name), strings.Join(args, " "))
	cmd := exec.CommandContext(r.ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(&stderr, r.log)
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// goCmd runs the go command; HYBRIDLIMIT_REQUIRE_REDIS makes a test or
// benchmark fail, not skip, without a redis-server.
func (r *runner) goCmd(args ...string) (string, error) { return r.goCmdEnv(nil, args...) }

// goCmdEnv is goCmd with env added to the environment.
func (r *runner) goCmdEnv(env []string, args ...string) (string, error) {
	return r.exec(append([]string{"HYBRIDLIMIT_REQUIRE_REDIS=1"}, env...), goBin(), args...)
}

func goBin() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// data is what the page shows.
type data struct {
	Machine Machine

	Default    SimRun // go run ./cmd/sim: the table as printed, and its figures
	Long       SimRun // 30 s
	Standalone SimRun
	Flash      SimRun
	Uniform    SimRun
	HighRate   SimRun
	HighRateSA SimRun
	Diag       SimRun // -diag of reserve at 200 ms: its stderr
	// Scale and ScaleTick: -scale 1,10,100, by default and with the
	// fetch linger a quarter interval.
	Scale, ScaleTick ScaleRun
	// Tail: -tail over 20 to 100,000 keys of one stream.
	Tail TailRun

	LiveOne, LiveEight SimRun
	// LiveTail and LiveTailBusy: the long tail live, TailKeys keys drawn
	// uniformly, with the default workers an instance and with
	// BusyWorkers.
	LiveTail, LiveTailBusy SimRun
	TailKeys, BusyWorkers  int

	Tests []TestRun
	// Peer is bench/gubernator's side-by-side run, Gubernator beside the
	// hybrid limiter: its report, and its test's log as Output.
	Peer SimRun

	HotPath, DenyEmpty, LocalBucket, LocalTable, Steady, SyncRound, RedisMem BenchRun

	// ScriptRedis and ScriptValkey are BenchmarkSyncScript on
	// redis-server and on valkey-server: the server's CPU per key message.
	ScriptRedis, ScriptValkey BenchRun
}

// Machine names where the figures came from.
type Machine struct {
	CPUModel   string
	NumCPU     int
	OS         string
	Go         string
	Redis      string
	Valkey     string
	Date       string
	LoadBefore string
	LoadAfter  string
	Took       string
}

func (r *runner) measure(svg string) (*data, error) {
	start := time.Now()
	d := &data{Machine: machine()}
	d.Machine.LoadBefore = loadAvg()
	var err error
	if d.Machine.Redis, err = r.exec(nil, "redis-server", "--version"); err != nil {
		return nil, err
	}
	d.Machine.Redis = redisVersion(d.Machine.Redis)
	if d.Machine.Valkey, err = r.exec(nil, "valkey-server", "--version"); err != nil {
		return nil, err
	}
	d.Machine.Valkey = redisVersion(d.Machine.Valkey)
	r.sim = filepath.Join(r.tmp, "sim")
	if _, err := r.goCmd("build", "-o", r.sim, "./cmd/sim"); err != nil {
		return nil, err
	}
	if err := r.simulate(d, svg); err != nil {
		return nil, err
	}
	if err := r.live(d); err != nil {
		return nil, err
	}
	if err := r.tests(d); err != nil {
		return nil, err
	}
	if err := r.benchmarks(d); err != nil {
		return nil, err
	}
	d.Machine.LoadAfter = loadAvg()
	d.Machine.Took = time.Since(start).Round(time.Second).String()
	return d, nil
}

// SimRun is one run of the simulator: the command as a reader types it,
// the report, and what it printed.
type SimRun struct {
	Cmd    string
	Report *sim.Report
	Output string // the table as printed (default run), or -diag's stderr
	Took   string
}

// ScaleRun is one cmd/sim -scale run.
type ScaleRun struct {
	Cmd    string
	Scaled []sim.Scaled
	Took   string
}

// TailRun is one cmd/sim -tail run.
type TailRun struct {
	Cmd   string
	Tails []sim.Tail
	Took  string
}

// sweepJSON runs cmd/sim with shown (a -scale or -tail sweep) and -json,
// and returns what it wrote, the command as shown and how long it took.
func sweepJSON[T any](r *runner, shown string) (out T, cmd, took string, err error) {
	t := time.Now()
	raw, err := r.exec(nil, r.sim, append(strings.Fields(shown), "-json", "-q")...)
	if err != nil {
		return out, "", "", err
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return out, "", "", fmt.Errorf("sim %s: %w", shown, err)
	}
	return out, "go run ./cmd/sim " + shown, since(t), nil
}

// scaleJSON runs cmd/sim -scale with args and -json.
func (r *runner) scaleJSON(shown string) (ScaleRun, error) {
	s, cmd, took, err := sweepJSON[[]sim.Scaled](r, shown)
	return ScaleRun{Cmd: cmd, Scaled: s, Took: took}, err
}

// tailJSON runs cmd/sim -tail with args and -json.
func (r *runner) tailJSON(shown string) (TailRun, error) {
	tails, cmd, took, err := sweepJSON[[]sim.Tail](r, shown)
	return TailRun{Cmd: cmd, Tails: tails, Took: took}, err
}

// Row returns the result of strategy at interval ("" for exact, local).
func (s SimRun) Row(strategy, interval string) (sim.Result, error) {
	for _, res := range s.Report.Results {
		if string(res.Strategy) != strategy {
			continue
		}
		if iv := strings.TrimPrefix(res.Label(), string(res.Strategy)); strings.TrimSpace(iv) == interval {
			return res, nil
		}
	}
	return sim.Result{}, fmt.Errorf("%s: no row %s %s", s.Cmd, strategy, interval)
}

// simJSON runs the simulator with args and -json, and reads its report.
func (r *runner) simJSON(shown string, args ...string) (SimRun, error) {
	t := time.Now()
	out, err := r.exec(nil, r.sim, append(args, "-json", "-q")...)
	if err != nil {
		return SimRun{}, err
	}
	rep := new(sim.Report)
	if err := json.Unmarshal([]byte(out), rep); err != nil {
		return SimRun{}, fmt.Errorf("sim %s: %w", strings.Join(args, " "), err)
	}
	return SimRun{Cmd: "go run ./cmd/sim " + shown, Report: rep, Took: since(t)}, nil
}

func (r *runner) simulate(d *data, svg string) error {
	// The default run, as a reader sees it, with its figures from -csv.
	t := time.Now()
	csvPath := filepath.Join(r.tmp, "default.csv")
	table, err := r.exec(nil, r.sim, "-q", "-csv", csvPath, "-svg", svg)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(csvPath)
	if err != nil {
		return err
	}
	rep, err := readCSV(b)
	if err != nil {
		return fmt.Errorf("sim -csv: %w", err)
	}
	d.Default = SimRun{Cmd: "go run ./cmd/sim", Report: rep, Output: strings.TrimRight(table, "\n"), Took: since(t)}

	runs := []struct {
		dst   *SimRun
		shown string
	}{
		{&d.Long, "-duration 30s -strategies exact,optimistic,reserve -sync 200ms,1s"},
		{&d.Standalone, "-standalone -strategies reserve,reserve-sharded -sync 200ms"},
		{&d.Flash, "-scenario flash -strategies exact,optimistic,reserve -sync 200ms,1s"},
		{&d.Uniform, "-scenario uniform -duration 30s -strategies reserve -sync 200ms,1s"},
		{&d.HighRate, "-rate 200000 -strategies reserve -sync 200ms"},
		{&d.HighRateSA, "-rate 200000 -standalone -strategies reserve -sync 200ms"},
	}
	for _, run := range runs {
		if *run.dst, err = r.simJSON(run.shown, strings.Fields(run.shown)...); err != nil {
			return err
		}
	}
	// -diag writes its counters on stderr.
	args := []string{"-strategies", "reserve", "-sync", "200ms", "-diag", "-q"}
	cmd := exec.CommandContext(r.ctx, r.sim, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	fmt.Fprintf(r.log, "results: sim %s\n", strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("sim %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	d.Diag = SimRun{Cmd: "go run ./cmd/sim -strategies reserve -sync 200ms -diag", Output: strings.TrimSpace(stderr.String())}
	if d.Scale, err = r.scaleJSON("-scale 1,10,100"); err != nil {
		return err
	}
	if d.ScaleTick, err = r.scaleJSON("-scale 1,10,100 -strategies reserve -linger 50ms"); err != nil {
		return err
	}
	d.Tail, err = r.tailJSON("-scenario uniform -rate 20000 -limit 100 -duration 30s -tail 20,200,2000,20000,100000")
	return err
}

// readCSV reads the report cmd/sim -csv writes: the fields the figures
// below use.
func readCSV(b []byte) (*sim.Report, error) {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 2 {
		return nil, errors.New("no rows")
	}
	head := strings.Split(lines[0], ",")
	col := func(row []string, name string) (string, error) {
		i := slices.Index(head, name)
		if i < 0 || i >= len(row) {
			return "", fmt.Errorf("no column %s", name)
		}
		return row[i], nil
	}
	rep := &sim.Report{Mode: "virtual"}
	for _, line := range lines[1:] {
		row := strings.Split(line, ",")
		var res sim.Result
		fields := []struct {
			name string
			f    *float64
			i    *int64
		}{
			{"decisions", nil, &res.Decisions}, {"admitted", nil, &res.Admitted}, {"oracle_admitted", nil, &res.OracleAdmitted},
			{"overshoot_ratio", &res.OvershootRatio, nil}, {"undershoot_ratio", &res.UndershootRatio, nil},
			{"worst_window_overshoot_ratio", &res.WorstWindowOvershootRatio, nil},
			{"redis_cmds", nil, &res.RedisCmds}, {"redis_cmds_per_decision", &res.RedisCmdsPerDecision, nil},
			{"hottest_slot_share", &res.HottestSlotShare, nil},
		}
		s, err := col(row, "strategy")
		if err != nil {
			return nil, err
		}
		res.Strategy = sim.Strategy(s)
		if s, err = col(row, "sync_interval_ms"); err != nil {
			return nil, err
		} else if s != "" {
			ms, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, err
			}
			res.SyncIntervalMS = &ms
		}
		for _, f := range fields {
			s, err := col(row, f.name)
			if err != nil {
				return nil, err
			}
			if f.f != nil {
				*f.f, err = strconv.ParseFloat(s, 64)
			} else {
				*f.i, err = strconv.ParseInt(s, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.name, err)
			}
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// live runs the simulator live against a redis-server of its own.
func (r *runner) live(d *data) error {
	addr, stop, err := r.redisServer()
	if err != nil {
		return err
	}
	defer stop()
	const shown = "-live -redis ADDR -strategies exact,optimistic,reserve -sync 200ms"
	args := strings.Fields(strings.Replace(shown, "ADDR", addr, 1))
	if d.LiveOne, err = r.simJSON(shown+" -instances 1", append(args, "-instances", "1")...); err != nil {
		return err
	}
	if d.LiveEight, err = r.simJSON(shown, args...); err != nil {
		return err
	}
	d.TailKeys, d.BusyWorkers = liveTailKeys, busyWorkers
	tail := fmt.Sprintf("-live -redis ADDR -scenario uniform -keys %d -strategies exact,reserve -sync 200ms", liveTailKeys)
	args = strings.Fields(strings.Replace(tail, "ADDR", addr, 1))
	if d.LiveTail, err = r.simJSON(tail, args...); err != nil {
		return err
	}
	busy := fmt.Sprintf(" -workers %d", busyWorkers)
	d.LiveTailBusy, err = r.simJSON(tail+busy, append(args, strings.Fields(busy)...)...)
	return err
}

// The long tail live: keys enough that nearly every decision is its
// instance's first of its key in a while, and the workers an instance has
// in its busy run, more decisions waiting at once than the default's.
const (
	liveTailKeys = 100_000
	busyWorkers  = 16
)

// redisServer starts a redis-server on a free loopback port, with no
// persistence, and returns its address and what stops it.
func (r *runner) redisServer() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dir := filepath.Join(r.tmp, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(5 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server on %s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRun is one go test invocation and the log lines of its tests.
// Failed says a test failed: its log, with the failure, is on the page
// as it is of a pass, and make results ends in an error once the pages
// are written.
type TestRun struct {
	Title, Cmd, Log string
	Failed          bool
}

func (r *runner) tests(d *data) error {
	for _, t := range []struct{ title, env, pkg, run string }{
		{"One hot key on an exact limiter, whole and split 3 ways", "", "./sharding/", "TestGlobalSpreadsOverMasters"},
		{"One hot hybrid key, whole and split; exact budgets across splits and merges", "", "./sync/",
			"TestShardedSpreadsOverMasters|TestShardedReserveExact|TestAutoSplitMovesEveryToken"},
		{"Master failover and SIGKILL, exact limiters; many identities expiring", "", "./global/", "TestFailover|TestManyIdentities"},
		{"Master failover and SIGKILL, hybrid limiter", "", "./sync/", "TestFailover"},
		{"A fleet of 4 processes, 10,000 decisions a second each for 20 s, 200 keys Zipf 1.1, through the death (SIGKILL), a 3 s stall (SIGSTOP) and the failover (CLUSTER FAILOVER) of the master of the hottest key and of the presence record at 10 s; each line is one run: tokens over B + r T, in all and on the other masters' keys, the worst key, the window bound, limit denials of keys under half their rate",
			"HYBRIDLIMIT_FLEET_FULL=1", "./sync/", "TestFleetFailover"},
		{"Usage charged after the fact: 3 processes admit requests on an estimate of 500 tokens and settle each to its actual cost (100 to 2,000), on one Redis (10,000 tokens a minute) and on the cluster with the master of the key killed a third in (200,000 a minute); Redis must count exactly what they used",
			"", "./sync/", "TestChargeAcrossProcesses|TestFleetFailoverCharge"},
	} {
		run, err := r.test(t.title, t.env, t.pkg, t.run)
		if err != nil {
			return err
		}
		d.Tests = append(d.Tests, run)
	}
	return r.peer(d)
}

// peer runs bench/gubernator's side-by-side test, which writes its report
// where HYBRIDLIMIT_SIDE_BY_SIDE_JSON says.
func (r *runner) peer(d *data) error {
	path := filepath.Join(r.tmp, "side-by-side.json")
	args := []string{"-C", "bench/gubernator", "test", "-count=1", "-v", "-timeout", "20m", "-run", "^(TestSideBySide)$", "."}
	out, err := r.goCmdEnv([]string{"HYBRIDLIMIT_SIDE_BY_SIDE_JSON=" + path}, args...)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	d.Peer = SimRun{Cmd: "go " + strings.Join(args, " "), Report: new(sim.Report), Output: testLog(out)}
	return json.Unmarshal(b, d.Peer.Report)
}

// test runs the tests of pkg that match run, with env added to the
// environment; a failed test is in the TestRun, any other error returned.
func (r *runner) test(title, env, pkg, run string) (TestRun, error) {
	args := []string{"test", "-count=1", "-v", "-timeout", "20m", "-run", "^(" + run + ")$", pkg}
	environ := []string{"HYBRIDLIMIT_REQUIRE_REDIS=1"}
	cmd := "go " + strings.Join(args, " ")
	if env != "" {
		environ = append(environ, env)
		cmd = env + " " + cmd
	}
	out, err := r.exec(environ, goBin(), args...)
	failed := err != nil && strings.Contains(out, "\n--- FAIL: ")
	if err != nil && !failed {
		return TestRun{}, err
	}
	return TestRun{Title: title, Cmd: cmd, Log: testLog(out), Failed: failed}, nil
}

// testLog keeps, from go test -v output, which test runs, what it logged
// (t.Logf, without file and line) and its verdict.
func testLog(out string) string {
	var b strings.Builder
	inLog := false
	for _, line := range strings.Split(out, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		switch {
		case strings.HasPrefix(trimmed, "--- ") || strings.HasPrefix(line, "=== RUN "):
			b.WriteString(line + "\n")
			inLog = false
		case indent >= 4 && logPrefix(trimmed) > 0:
			b.WriteString(strings.Repeat(" ", indent-4) + trimmed[logPrefix(trimmed):] + "\n")
			inLog = true
		case inLog && indent >= 8 && trimmed != "":
			b.WriteString(line[4:] + "\n")
		default:
			inLog = false
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// logPrefix returns the length of a "name_test.go:123: " prefix at the
// start of s, or 0.
func logPrefix(s string) int {
	i := strings.Index(s, "_test.go:")
	if i <= 0 || strings.ContainsAny(s[:i], " \t") {
		return 0
	}
	rest := s[i+len("_test.go:"):]
	j := strings.Index(rest, ": ")
	if j <= 0 {
		return 0
	}
	if _, err := strconv.Atoi(rest[:j]); err != nil {
		return 0
	}
	return i + len("_test.go:") + j + 2
}

// BenchRun is one go test -bench invocation, its results by name.
type BenchRun struct {
	Cmd     string
	Results []Bench
}

// Bench is one benchmark over its -count runs: each unit's values.
type Bench struct {
	Name   string // without the -N GOMAXPROCS suffix
	Values map[string][]float64
}

// Get returns the benchmark whose name is name.
func (b BenchRun) Get(name string) (Bench, error) {
	for _, r := range b.Results {
		if r.Name == name {
			return r, nil
		}
	}
	return Bench{}, fmt.Errorf("%s: no benchmark %s", b.Cmd, name)
}

// Median returns the median value of unit over the runs.
func (b Bench) Median(unit string) (float64, error) {
	v := slices.Clone(b.Values[unit])
	if len(v) == 0 {
		return 0, fmt.Errorf("%s: no %s", b.Name, unit)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], nil
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, nil
}

// Range returns "min-max" of unit over the runs, or the one value.
func (b Bench) Range(unit string) string {
	v := b.Values[unit]
	if len(v) == 0 {
		return "-"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if lo == hi {
		return num(lo)
	}
	return num(lo) + "-" + num(hi)
}

// Units lists the units the benchmark reported, ns/op first.
func (b Bench) Units() []string {
	var u []string
	for k := range b.Values {
		u = append(u, k)
	}
	slices.SortFunc(u, func(x, y string) int {
		switch {
		case x == y:
			return 0
		case x == "ns/op":
			return -1
		case y == "ns/op":
			return 1
		}
		return strings.Compare(x, y)
	})
	return u
}

// parseBench reads go test -bench output: lines "BenchmarkX-2 N v unit v unit ...".
func parseBench(out string) []Bench {
	var res []Bench
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		i := slices.IndexFunc(res, func(b Bench) bool { return b.Name == name })
		if i < 0 {
			res = append(res, Bench{Name: name, Values: map[string][]float64{}})
			i = len(res) - 1
		}
		for j := 2; j+1 < len(f); j += 2 {
			v, err := strconv.ParseFloat(f[j], 64)
			if err != nil {
				continue
			}
			res[i].Values[f[j+1]] = append(res[i].Values[f[j+1]], v)
		}
	}
	return res
}

func (r *runner) benchmarks(d *data) error {
	const script = "-run ^$ -bench SyncScript -count 3 ./internal/scripts/"
	for _, b := range []struct {
		dst    *BenchRun
		args   string
		server string // HYBRIDLIMIT_SERVER, when not redis
	}{
		{&d.HotPath, "-run ^$ -bench LimiterAllow|SyncMapBaseline -cpu 2 -count 4 ./sync/", ""},
		{&d.DenyEmpty, "-run ^$ -bench LimiterDenyEmpty -cpu 2 -count 4 ./sync/", ""},
		{&d.LocalBucket, "-run ^$ -bench BucketAllow|XTimeRateAllow -benchmem -cpu 2 -count 4 ./local/", ""},
		{&d.LocalTable, "-run ^$ -bench TableAllow/keys=1e6|MapBaseline/keys=1e6 -benchmem -cpu 2 ./local/", ""},
		{&d.Steady, "-run ^$ -bench LimiterSteady -benchtime 80x -cpu 2 ./sync/", ""},
		{&d.SyncRound, "-run ^$ -bench LimiterSync/keys=100000 -benchtime 3x -cpu 2 ./sync/", ""},
		{&d.RedisMem, "-run ^$ -bench RedisMemory -benchtime 1x ./sync/", ""},
		{&d.ScriptRedis, script, ""},
		{&d.ScriptValkey, script, "valkey"},
	} {
		args := append([]string{"test"}, strings.Fields(b.args)...)
		var env []string
		cmd := "go test " + quoteBench(b.args)
		if b.server != "" {
			env = []string{"HYBRIDLIMIT_SERVER=" + b.server}
			cmd = env[0] + " " + cmd
		}
		out, err := r.goCmdEnv(env, args...)
		if err != nil {
			return err
		}
		*b.dst = BenchRun{Cmd: cmd, Results: parseBench(out)}
		if len(b.dst.Results) == 0 {
			return fmt.Errorf("%s: no benchmark results:\n%s", b.dst.Cmd, out)
		}
	}
	return nil
}

// quoteBench quotes the -run and -bench patterns of args for a shell.
func quoteBench(args string) string {
	f := strings.Fields(args)
	for i := 1; i < len(f); i++ {
		if f[i-1] == "-run" || f[i-1] == "-bench" {
			f[i] = "'" + f[i] + "'"
		}
	}
	return strings.Join(f, " ")
}

// machine reads what the figures depend on: the CPU, the OS, Go, the date.
func machine() Machine {
	m := Machine{
		CPUModel: "unknown CPU model",
		NumCPU:   runtime.NumCPU(),
		OS:       runtime.GOOS + "/" + runtime.GOARCH,
		Go:       runtime.Version(),
		Date:     time.Now().UTC().Format("2006-01-02"),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OS += ", Linux " + strings.TrimSpace(string(b))
	}
	if out, err := exec.Command(goBin(), "env", "GOVERSION").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	return m
}

// loadAvg returns the one-minute load average, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// redisVersion picks "7.0.15" out of redis-server --version.
func redisVersion(s string) string {
	for _, f := range strings.Fields(s) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(s)
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

// num prints x with three significant digits, or as an integer from 1000.
func num(x float64) string {
	if x >= 1000 || x == float64(int64(x)) {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}
