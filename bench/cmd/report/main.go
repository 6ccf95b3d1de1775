// Command report turns the output of the peer benchmarks (package bench,
// run by bench/run.sh) into a markdown report: the machine, Go and Redis
// versions and the date, each goal of the benchmark issue with the ratio
// that decides it, and every benchmark's median.
//
// Usage:
//
//	report -in RESULTS.txt [-load-before "6.1 6.5 6.7"] [-load-after "..."] > RESULTS.md
//
// The input is standard Go benchmark output, one or more rounds of every
// benchmark, each round opened by its "goos:" header line as `go test`
// prints it. Ratios are computed within a round, between benchmarks that
// ran minutes apart at most on the same machine and Redis, and summarized
// by their median over the rounds with the range beside it; a goal is met
// when the median meets it.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	in := flag.String("in", "RESULTS.txt", "benchmark output to read")
	loadBefore := flag.String("load-before", "", "load average when the run started")
	loadAfter := flag.String("load-after", "", "load average when the run ended")
	flag.Parse()
	f, err := os.Open(*in)
	if err != nil {
		fatal(err)
	}
	defer f.Close()
	run, err := parse(f)
	if err != nil {
		fatal(fmt.Errorf("%s: %w", *in, err))
	}
	if len(run.rounds) == 0 {
		fatal(fmt.Errorf("%s: no benchmark results", *in))
	}
	env := environment(run, *loadBefore, *loadAfter)
	if fi, err := f.Stat(); err == nil {
		// The run's date is when its output was last written, so that a
		// report made again from the same output says the same.
		env.date = fi.ModTime().UTC().Format("2006-01-02 15:04 MST")
	}
	write(os.Stdout, env, run, *in)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(1)
}

// A result is one benchmark line: its metrics by unit ("ns/op" -> 61.2).
type result map[string]float64

// round is one run of every benchmark, by name without the -GOMAXPROCS
// suffix.
type round map[string]result

// benchRun is a whole input: its rounds, the benchmark names in the order
// first seen, the configuration lines (last value wins) and the GOMAXPROCS
// the names carried.
type benchRun struct {
	rounds []round
	names  []string
	config map[string]string
	procs  string
}

// parse reads Go benchmark output. A "goos:" line opens a round; a result
// line is "BenchmarkName-P  N  value unit  value unit ...".
func parse(r io.Reader) (*benchRun, error) {
	run := &benchRun{config: map[string]string{}}
	var cur round
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := configLine(line); ok {
			run.config[k] = v
			if k == "goos" {
				cur = nil // the next result opens a round
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a log line that starts with a benchmark's name
		}
		name, procs := splitProcs(f[0])
		if procs != "" {
			run.procs = procs
		}
		res := result{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("bad value %q in %q", f[i], line)
			}
			res[f[i+1]] = v
		}
		if cur == nil || cur[name] != nil {
			cur = round{}
			run.rounds = append(run.rounds, cur)
		}
		cur[name] = res
		if !slices.Contains(run.names, name) {
			run.names = append(run.names, name)
		}
	}
	return run, sc.Err()
}

// configLine reports whether line is a "key: value" configuration line, its
// key starting with a lower-case letter and holding no space.
func configLine(line string) (key, value string, ok bool) {
	k, v, found := strings.Cut(line, ":")
	if !found || k == "" || k[0] < 'a' || k[0] > 'z' || strings.ContainsAny(k, " \t") {
		return "", "", false
	}
	return k, strings.TrimSpace(v), true
}

// splitProcs splits "BenchmarkX/a=1-2" into "BenchmarkX/a=1" and "2".
func splitProcs(s string) (name, procs string) {
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return s, ""
	}
	if _, err := strconv.Atoi(s[i+1:]); err != nil {
		return s, ""
	}
	return s[:i], s[i+1:]
}

// values returns the metric unit of benchmark name in every round that has
// it.
func (r *benchRun) values(name, unit string) []float64 {
	var vs []float64
	for _, rd := range r.rounds {
		if v, ok := rd[name][unit]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// ratios returns num's metric over den's, round by round, for the rounds
// that have both.
func (r *benchRun) ratios(num, den, unit string) []float64 {
	var vs []float64
	for _, rd := range r.rounds {
		n, ok1 := rd[num][unit]
		d, ok2 := rd[den][unit]
		if ok1 && ok2 && d != 0 {
			vs = append(vs, n/d)
		}
	}
	return vs
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// env is what the report says about where it ran.
type env struct {
	date, cpu, nproc, goVersion, redis, kernel, loadBefore, loadAfter string
}

func environment(run *benchRun, loadBefore, loadAfter string) env {
	e := env{
		date:       time.Now().UTC().Format("2006-01-02 15:04 MST"),
		cpu:        cpuModel(),
		nproc:      strconv.Itoa(runtime.NumCPU()),
		goVersion:  runtime.Version(),
		redis:      run.config["redis"],
		loadBefore: loadBefore,
		loadAfter:  loadAfter,
	}
	// Go's cpu: line names the processor as the CPUID brand string, which
	// on a virtual machine can differ from /proc/cpuinfo: show both.
	if goCPU := run.config["cpu"]; e.cpu == "" {
		e.cpu = goCPU
	} else if goCPU != "" && goCPU != e.cpu {
		e.cpu += " (Go reports \"" + goCPU + "\")"
	}
	if out, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		e.goVersion = strings.TrimSpace(string(out)) // the toolchain that built the benchmarks
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if e.redis == "" {
		e.redis = "not run"
	}
	return e
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// A goal is one target of the issue, decided by the median over the rounds
// of the ratio num/den of unit (of num's own value when den is ""),
// compared with target: at least it when atLeast, at most it otherwise.
type goal struct {
	what     string
	num, den string
	unit     string
	target   float64
	atLeast  bool
}

// The benchmarks the goals compare.
const (
	xtime       = "BenchmarkXTimeRateAllow"
	uber        = "BenchmarkUberRatelimitTake"
	bucket      = "BenchmarkLocalBucketAllow"
	clock       = "BenchmarkTimeSince"
	table       = "BenchmarkLocalTableAllow/keys=1e6"
	hybrid      = "BenchmarkHybridAllow/"
	gcra        = "BenchmarkGlobalGCRAAllow/"
	redisRate   = "BenchmarkRedisRateAllow/"
	hot         = "keys=1/par=1"
	hotMany     = "keys=1/par=16"
	spreadMany  = "keys=1e4/par=16"
	decisionsPS = "decisions/s"
)

// goals are the targets, each measured where the issue puts it.
var goals = []goal{
	{"hybrid hot-path decision at least 4x faster than x/time/rate Allow (x/time/rate ns/op ÷ hybrid ns/op; one hot key, GOMAXPROCS goroutines)",
		xtime, hybrid + hot, "ns/op", 4, true},
	{"exact global within 1.2x of redis_rate per decision, one hot key, par=1 (ours ns/op ÷ theirs)",
		gcra + hot, redisRate + hot, "ns/op", 1.2, false},
	{"exact global within 1.2x of redis_rate per decision, one hot key, par=16",
		gcra + hotMany, redisRate + hotMany, "ns/op", 1.2, false},
	{"exact global within 1.2x of redis_rate per decision, 10^4 keys, par=16",
		gcra + spreadMany, redisRate + spreadMany, "ns/op", 1.2, false},
	{"exact global with no more allocations than redis_rate (ours allocs/op ÷ theirs, one hot key, par=16)",
		gcra + hotMany, redisRate + hotMany, "allocs/op", 1, false},
	{"hybrid at least 50x redis_rate's decisions per second on the same Redis, one hot key, par=16 (ours ÷ theirs)",
		hybrid + hotMany, redisRate + hotMany, decisionsPS, 50, true},
	{"hybrid at least 50x redis_rate's decisions per second, 10^4 keys, par=16",
		hybrid + spreadMany, redisRate + spreadMany, decisionsPS, 50, true},
	{"1M keys in a local.Table at no more than 200 bytes each (heap bytes per key)",
		table, "", "B/key", 200, false},
}

// comparisons are ratios reported without a target, for context.
var comparisons = []goal{
	{what: "local.Bucket Allow vs x/time/rate Allow (x/time/rate ns/op ÷ ours)", num: xtime, den: bucket, unit: "ns/op"},
	{what: "local.Bucket Allow vs uber ratelimit Take (uber ns/op ÷ ours)", num: uber, den: bucket, unit: "ns/op"},
	{what: "one clock read a call, nothing shared, vs x/time/rate Allow (x/time/rate ns/op ÷ time.Since): the most a limiter reading the clock once per decision with time.Since can gain", num: xtime, den: clock, unit: "ns/op"},
	{what: "local.Bucket Allow over one clock read a call (ours ns/op ÷ time.Since): what the shared state adds", num: bucket, den: clock, unit: "ns/op"},
	{what: "hybrid hot path vs uber ratelimit Take (uber ns/op ÷ hybrid)", num: uber, den: hybrid + hot, unit: "ns/op"},
	{what: "hybrid vs redis_rate decisions per second, one hot key, par=1", num: hybrid + hot, den: redisRate + hot, unit: decisionsPS},
	{what: "exact global vs redis_rate Redis time per decision, one hot key, par=16 (ours ÷ theirs)", num: gcra + hotMany, den: redisRate + hotMany, unit: "redis-ns/op"},
	{what: "exact global vs redis_rate bytes allocated per decision, one hot key, par=16 (ours ÷ theirs)", num: gcra + hotMany, den: redisRate + hotMany, unit: "B/op"},
	{what: "hybrid heap per tracked key, measured at 10^4 keys (the issue's 200-byte goal read for the hybrid)", num: hybrid + spreadMany, unit: "B/key"},
	{what: "hybrid Redis commands per decision, one hot key, par=16 (redis_rate: see the table below)", num: hybrid + hotMany, unit: "redis-cmds/op"},
	{what: "hybrid Redis commands per decision, 10^4 keys, par=16", num: hybrid + spreadMany, unit: "redis-cmds/op"},
}

// units are the metrics the full table shows, in order.
var units = []string{"ns/op", decisionsPS, "B/op", "allocs/op", "redis-cmds/op", "redis-scripts/op", "redis-ns/op", "denied/op", "waits/op", "degraded/op", "warmup-denials", "B/key"}

func write(w io.Writer, e env, run *benchRun, in string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# Benchmarks against peers\n\n")
	p("Produced by `bench/run.sh` (which runs `bench/cmd/report`); do not edit by hand. ")
	if !filepath.IsAbs(in) {
		in = "bench/" + in
	}
	p("Raw output, for benchstat: `%s`.\n\n", in)
	p("| | |\n|---|---|\n")
	p("| date | %s |\n", e.date)
	p("| machine | %s, %s logical CPUs (nproc), GOMAXPROCS %s |\n", e.cpu, e.nproc, orDash(run.procs))
	if e.kernel != "" {
		p("| OS | %s |\n", e.kernel)
	}
	p("| Go | %s |\n", e.goVersion)
	p("| Redis | %s, one loopback server started by the benchmarks, persistence off |\n", e.redis)
	p("| rounds | %d (every benchmark once per round; ratios are taken within a round) |\n", len(run.rounds))
	if e.loadBefore != "" || e.loadAfter != "" {
		p("| load average (1, 5, 15 min) | %s before, %s after |\n", orDash(e.loadBefore), orDash(e.loadAfter))
	}
	p("\n## Goals\n\n")
	p("Each ratio is computed per round, from benchmarks of the same run, and summarized by its median over the rounds; the range is [min, max]. A goal is met when the median meets the target.\n\n")
	p("| goal | ours | peer | ratio (median) | range | target | met |\n|---|---|---|---|---|---|---|\n")
	for _, g := range goals {
		writeGoal(w, run, g, true)
	}
	for _, name := range run.names {
		for _, u := range []string{"degraded/op", "denied/op"} {
			if vs := run.values(name, u); len(vs) > 0 && slices.Max(vs) > 0 {
				p("\nNote: %s reported %s up to %s in a round (median %s).\n", strings.TrimPrefix(name, "Benchmark"), u, number(slices.Max(vs)), number(median(vs)))
			}
		}
	}
	p("\n## Other comparisons\n\n")
	p("| comparison | ours | peer | ratio (median) | range |\n|---|---|---|---|---|\n")
	for _, g := range comparisons {
		writeGoal(w, run, g, false)
	}
	p("\n## Every benchmark (median over rounds)\n\n")
	present := []string{}
	for _, u := range units {
		for _, name := range run.names {
			if len(run.values(name, u)) > 0 {
				present = append(present, u)
				break
			}
		}
	}
	p("| benchmark |")
	for _, u := range present {
		p(" %s |", u)
	}
	p("\n|---|")
	for range present {
		p("---|")
	}
	p("\n")
	for _, name := range run.names {
		p("| %s |", strings.TrimPrefix(name, "Benchmark"))
		for _, u := range present {
			if vs := run.values(name, u); len(vs) > 0 {
				p(" %s |", number(median(vs)))
			} else {
				p(" |")
			}
		}
		p("\n")
	}
	p("\nUnits: redis-cmds/op counts every command Redis ran per decision, those a script runs with redis.call included (as INFO commandstats counts them); redis-scripts/op counts the EVAL/EVALSHA requests clients sent; redis-ns/op is the time Redis spent in those scripts. denied/op is the share of decisions refused under a limit none should reach; waits/op the share that waited for a fetch from Redis; degraded/op the share decided by the hybrid's failure policy without Redis; warmup-denials the first decisions on a key refused while warming up; B/key the live heap per key after a garbage collection. bench/README.md describes each benchmark and its caveats.\n")
}

// writeGoal writes one row of the goals table (withTarget) or of the
// comparisons table.
func writeGoal(w io.Writer, run *benchRun, g goal, withTarget bool) {
	ratios := run.values(g.num, g.unit)
	if g.den != "" {
		ratios = run.ratios(g.num, g.den, g.unit)
	}
	ours, peer := g.num, g.den
	// Speed-ups put the peer's time over ours; our figure still goes in
	// the "ours" column.
	if peerIsNum(g) {
		ours, peer = g.den, g.num
	}
	oursV, peerV := "missing", "—"
	if vs := run.values(ours, g.unit); len(vs) > 0 {
		oursV = quantity(median(vs), g.unit)
	}
	if peer != "" {
		peerV = "missing"
		if vs := run.values(peer, g.unit); len(vs) > 0 {
			peerV = quantity(median(vs), g.unit)
		}
	}
	ratio, rng, met := "—", "—", "no data"
	if len(ratios) > 0 {
		m := median(ratios)
		ratio = number(m)
		if g.den == "" {
			ratio = quantity(m, g.unit)
		}
		rng = "[" + number(slices.Min(ratios)) + ", " + number(slices.Max(ratios)) + "]"
		if g.atLeast && m >= g.target || !g.atLeast && m <= g.target {
			met = "**yes**"
		} else {
			met = "**no**"
		}
	}
	if !withTarget {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", g.what, oursV, peerV, ratio, rng)
		return
	}
	target := "≤ " + number(g.target)
	if g.atLeast {
		target = "≥ " + number(g.target)
	}
	fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", g.what, oursV, peerV, ratio, rng, target, met)
}

// peerIsNum reports whether the peer is the numerator of g's ratio: the
// time ratios that say how many times faster we are.
func peerIsNum(g goal) bool {
	return g.unit == "ns/op" && (g.num == xtime || g.num == uber)
}

// quantity renders v in unit for a reader: 61.2 ns, 25.3 µs, 12.9M/s.
func quantity(v float64, unit string) string {
	switch unit {
	case "ns/op":
		switch {
		case v >= 1e6:
			return number(v/1e6) + " ms"
		case v >= 1e3:
			return number(v/1e3) + " µs"
		}
		return number(v) + " ns"
	case decisionsPS:
		switch {
		case v >= 1e6:
			return number(v/1e6) + "M/s"
		case v >= 1e3:
			return number(v/1e3) + "k/s"
		}
		return number(v) + "/s"
	case "B/key", "B/op":
		return number(v) + " B"
	}
	return number(v) + " " + unit
}

// number renders v with three significant digits, or as an integer when
// that is as exact.
func number(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000 || v == float64(int64(v)):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
