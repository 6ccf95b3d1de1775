// Command sim measures the overshoot of this module's rate limiters
// against their throughput and Redis cost, under hotspot load. It is a thin
// front end to package sim.
//
// With no flags it runs the hotspot scenario in virtual time on an
// embedded Redis, every strategy, at sync intervals 50ms to 1s, and prints
// on stdout a line naming the scenario, a table, and a legend of its
// columns; on stderr it reports each run as it ends (-q: not at all):
//
//	go run ./cmd/sim
//	go run ./cmd/sim -scenario flash -strategies reserve,optimistic -sync 200ms -json
//	go run ./cmd/sim -live -redis 127.0.0.1:6379 -duration 5s
//
// Run it with -h for every flag. A bad flag exits with status 2, a failed
// run with 1. A live run whose hybrid limiters failed to sync (their
// failure policy deciding instead) still exits 0, with a warning on stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/sim"
)

func main() {
	// A virtual run allocates fast and keeps little (a few tens of MB): a
	// larger GC target than the default saves about a tenth of its CPU.
	debug.SetGCPercent(400)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the parsed flags.
type options struct {
	cfg      sim.Config
	scales   []float64 // -scale
	tail     []int     // -tail
	live     bool
	target   sim.LiveTarget
	json     bool
	csv, svg string
	progress bool
	mode     string // "virtual" or "live"
	diag     bool
	cpuprof  string
}

// usageError is a bad flag or argument: exit status 2. The flag package
// prints its own errors (printed) with the usage.
type usageError struct {
	msg     string
	printed bool
}

func (e usageError) Error() string { return e.msg }

func bad(format string, args ...any) error { return usageError{msg: fmt.Sprintf(format, args...)} }

// parse turns the arguments into options, or a usageError.
func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		scenario   = fs.String("scenario", string(sim.Hotspot), "workload: hotspot, uniform, flash, skewed-lb")
		strategies = fs.String("strategies", "all", "comma list of exact, local, optimistic, reserve, reserve-sharded; or all")
		syncs      = fs.String("sync", "50ms,100ms,200ms,500ms,1s", "comma list of sync intervals for optimistic and reserve")
		instances  = fs.Int("instances", 0, "limiter instances (default 8)")
		keys       = fs.Int("keys", 0, "keys (default 2000; uniform 100, flash 200)")
		duration   = fs.Duration("duration", 0, "virtual time simulated, or live run length (default 8s virtual, 10s live)")
		seed       = fs.Uint64("seed", 1, "seed of the arrival stream")
		rtt        = fs.Duration("rtt", sim.DefaultRTT, "network round trip modelled in virtual mode")
		rate       = fs.Float64("rate", 0, "mean requests per second, all keys (default 6000; uniform 12000, flash 4000)")
		limit      = fs.Int64("limit", 100, "every key's limit, per second")
		burst      = fs.Int64("burst", 0, "every key's burst (default: the limit)")
		zipf       = fs.Float64("zipf", 1.1, "Zipf exponent of hotspot and skewed-lb keys, above 1")
		flash      = fs.Float64("flash", 50, "flash: factor by which key 0's demand steps up at half time (live: its share of the draws, from 1/keys to at most all)")
		skew       = fs.Float64("skew", 0.5, "skewed-lb: share of a key's requests sent to its home instance")
		live       = fs.Bool("live", false, "run in real time against -redis or -cluster")
		redisAddr  = fs.String("redis", "", "live: a Redis server, host:port")
		cluster    = fs.String("cluster", "", "live: comma list of Redis Cluster nodes")
		workers    = fs.Int("workers", 0, fmt.Sprintf("live: goroutines per instance, 1 to %d (default 2 x GOMAXPROCS)", sim.MaxWorkers))
		durable    = fs.Int("durable", 0, "live: hybrid sync calls wait for this many replicas (WAIT), to measure durable sync")
		maxWait    = fs.Duration("max-wait", 0, "live: how long a hybrid decision out of allowance waits for Redis before the failure policy decides (0: the limiter's default, 100ms)")
		jsonOut    = fs.Bool("json", false, "write the report as JSON on stdout instead of the table")
		csvFile    = fs.String("csv", "", "also write the report as CSV to `FILE`")
		svgFile    = fs.String("svg", "", "also draw overshoot and undershoot against Redis commands per decision as SVG to `FILE`")
		quiet      = fs.Bool("q", false, "report no progress on stderr (by default each run is reported as it ends)")
		diag       = fs.Bool("diag", false, "print each run's limiter counters, worst keys and load on each Redis node on stderr, and what splitting hot keys did to the nodes")
		standalone = fs.Bool("standalone", false, "virtual: model one Redis server, not a cluster (one script call a round)")
		linger     = fs.Duration("linger", 0, "hybrid: how long a decision out of allowance waits for others before their keys go to Redis together (sync.Tuning.FetchLinger)")
		scales     = fs.String("scale", "", "virtual: comma list of factors, such as 1,10,100, by which to multiply the request rate and every key's limit: one table of cost against traffic, as a cluster and on one server (default strategies exact,reserve at 200ms; exact at the first scale only)")
		tail       = fs.String("tail", "", "virtual: comma list of key counts, such as 20,200,2000,20000, over which to spread the same requests: one table of Redis cost against how often an instance sees a key (default strategies exact,reserve at 200ms)")
		cpuprof    = fs.String("cpuprofile", "", "write a CPU profile of the run to `FILE`, for go tool pprof")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sim [flags]\n\nSimulates the rate limiters on a workload and prints overshoot, undershoot and Redis cost per strategy and sync interval.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{msg: err.Error(), printed: true}
	}
	if fs.NArg() > 0 {
		return nil, bad("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	w := sim.Workload(*scenario)
	if !slices.Contains(sim.Workloads(), w) {
		return nil, bad("-scenario: unknown scenario %q (want hotspot, uniform, flash or skewed-lb)", w)
	}
	sc := sim.DefaultScenario(w)
	sc.Seed = *seed
	if set["instances"] {
		sc.Instances = *instances
	}
	if set["keys"] {
		sc.Keys = *keys
	}
	if set["rate"] {
		sc.Rate = *rate
	}
	switch {
	case set["duration"]:
		sc.Duration = *duration
	case *live:
		sc.Duration = 10 * time.Second
	}
	b := *limit
	if set["burst"] {
		b = *burst
	}
	sc.Limit = hybridlimit.PerSecond(*limit).WithBurst(b)
	sc.ZipfS, sc.Flash, sc.Skew = *zipf, *flash, *skew
	if err := sc.Validate(); err != nil {
		return nil, bad("%s", strings.TrimPrefix(err.Error(), "sim: "))
	}
	if *scales != "" || *tail != "" {
		if !set["strategies"] {
			*strategies = "exact,reserve"
		}
		if !set["sync"] {
			*syncs = "200ms"
		}
	}
	strats, err := sim.ParseStrategies(*strategies)
	if err != nil {
		return nil, bad("-strategies: %s", strings.TrimPrefix(err.Error(), "sim: "))
	}
	intervals, err := sim.ParseIntervals(*syncs)
	if err != nil {
		return nil, bad("-sync: %s", strings.TrimPrefix(err.Error(), "sim: "))
	}
	if *rtt < 0 || *rtt > 10*time.Second {
		return nil, bad("-rtt %v is outside [0, 10s]", *rtt)
	}
	o := &options{
		cfg:      sim.Config{Scenario: sc, Strategies: strats, Intervals: intervals, RTT: *rtt, Standalone: *standalone, Linger: *linger},
		live:     *live,
		json:     *jsonOut,
		csv:      *csvFile,
		svg:      *svgFile,
		progress: !*quiet,
		mode:     "virtual",
		diag:     *diag,
		cpuprof:  *cpuprof,
	}
	switch {
	case !*live && (*redisAddr != "" || *cluster != "" || set["workers"] || set["durable"] || set["max-wait"]):
		return nil, bad("-redis, -cluster, -workers, -durable and -max-wait need -live")
	case *durable < 0 || *durable > 100:
		return nil, bad("-durable %d is outside [0, 100]", *durable)
	case *maxWait < 0:
		return nil, bad("-max-wait %v is negative", *maxWait)
	case *live && *redisAddr == "" && *cluster == "":
		return nil, bad("-live needs -redis host:port or -cluster a,b,c")
	case *redisAddr != "" && *cluster != "":
		return nil, bad("give -redis or -cluster, not both")
	case *live && set["rtt"]:
		return nil, bad("-rtt is for virtual mode; live mode has the real one")
	case *live && *standalone:
		return nil, bad("-standalone is for virtual mode; live mode uses the Redis it is given")
	case *tail != "" && (*scales != "" || set["keys"] || *live || *diag || *csvFile != "" || *svgFile != ""):
		return nil, bad("-tail runs virtual mode over its own key counts and writes a table or -json; not with -scale, -keys, -live, -diag, -csv or -svg")
	case *scales != "" && (*live || *standalone || *diag || *csvFile != "" || *svgFile != ""):
		return nil, bad("-scale runs virtual mode, as a cluster and on one server, and writes a table or -json; not with -live, -standalone, -diag, -csv or -svg")
	case set["workers"] && (*workers < 1 || *workers > sim.MaxWorkers):
		return nil, bad("-workers %d is outside [1, %d]", *workers, sim.MaxWorkers)
	case set["workers"] && *workers > sim.MaxTotalWorkers/sc.Instances:
		return nil, bad("-workers %d x -instances %d is more than %d workers in all", *workers, sc.Instances, sim.MaxTotalWorkers)
	}
	if *live {
		o.mode = "live"
	}
	if *scales != "" {
		if o.scales, err = sim.ParseScales(*scales); err != nil {
			return nil, bad("-scale: %s", strings.TrimPrefix(err.Error(), "sim: "))
		}
	}
	if *tail != "" {
		if o.tail, err = sim.ParseKeyCounts(*tail); err != nil {
			return nil, bad("-tail: %s", strings.TrimPrefix(err.Error(), "sim: "))
		}
	}
	o.target = sim.LiveTarget{Addr: *redisAddr, Workers: *workers, Durable: *durable, MaxWait: *maxWait}
	if *cluster != "" {
		for _, a := range strings.Split(*cluster, ",") {
			if a = strings.TrimSpace(a); a != "" {
				o.target.Cluster = append(o.target.Cluster, a)
			}
		}
		if len(o.target.Cluster) == 0 {
			return nil, bad("-cluster %q names no node", *cluster)
		}
	}
	return o, nil
}

// run runs the command with args and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) { // parse returns no other error
		if !ue.printed {
			fmt.Fprintf(stderr, "sim: %s\nRun sim -h for the flags.\n", ue.msg)
		}
		return 2
	}
	start := time.Now()
	if o.progress {
		o.cfg.Progress = func(done, total int, r sim.Result) {
			fmt.Fprintf(stderr, "sim: %*d/%d at %5.1fs: %-21s overshoot %s  cmds/decision %.4f  (this run %.2fs)\n",
				len(strconv.Itoa(total)), done, total, time.Since(start).Seconds(), r.Label(),
				pctStr(r.OvershootRatio), r.RedisCmdsPerDecision, r.Elapsed.Seconds())
		}
		if o.scales == nil && o.tail == nil {
			title, _ := describe(o)
			fmt.Fprintf(stderr, "sim: %d runs of %s; each is reported as it ends\n", runCount(o.cfg), title)
		}
	}
	o.cfg.Detail = o.diag
	if o.cpuprof != "" {
		stop, err := startProfile(o.cpuprof)
		if err != nil {
			return fail(stderr, err)
		}
		defer stop()
	}
	if o.scales != nil {
		return runSweep(o, stdout, stderr, start, fmt.Sprintf("at scales %v, as a cluster and on one server", o.scales),
			func() ([]sim.Scaled, error) { return sim.RunScales(ctx, o.cfg, o.scales) }, writeScales)
	}
	if o.tail != nil {
		return runSweep(o, stdout, stderr, start, fmt.Sprintf("over %v keys", o.tail),
			func() ([]sim.Tail, error) { return sim.RunTail(ctx, o.cfg, o.tail) }, writeTail)
	}
	var rep *sim.Report
	if o.live {
		rep, err = sim.RunLive(ctx, o.cfg, o.target)
	} else {
		rep, err = sim.RunVirtual(ctx, o.cfg)
	}
	if err != nil {
		return fail(stderr, err)
	}
	if o.progress {
		fmt.Fprintf(stderr, "sim: %d runs in %.1fs\n", len(rep.Results), time.Since(start).Seconds())
	}
	if o.diag {
		_ = rep.WriteDiag(stderr) // as every other write to stderr, best effort
	}
	if o.live {
		warnFallback(stderr, rep, o.target.Durable)
	}
	if o.json {
		err = rep.WriteJSON(stdout)
	} else {
		err = writeTable(stdout, rep, o)
	}
	if err == nil && o.csv != "" {
		err = writeFile(o.csv, rep.WriteCSV)
	}
	if err == nil && o.svg != "" {
		err = writeFile(o.svg, rep.WriteSVG)
	}
	if err != nil {
		return fail(stderr, err)
	}
	return 0
}

// fail prints a failed run's error with one "sim: " and returns status 1:
// package sim's errors carry the prefix already, others (a file's, a
// cancelled context's) do not.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "sim: %s\n", strings.TrimPrefix(err.Error(), "sim: "))
	return 1
}

// startProfile starts a CPU profile into path and returns what stops it.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func pctStr(x float64) string { return fmt.Sprintf("%.2f%%", 100*x) }

// warnFallback warns of the live runs whose hybrid limiters failed to
// sync, and so left decisions to their failure policy: such a run's
// figures measure the fallback, not the strategy, though it ends like any
// other. A fetch that outlasts the max wait on a loaded machine is the
// policy's too, so a few such decisions (up to 1%) in a run whose rounds
// all succeeded are not worth a warning.
func warnFallback(w io.Writer, rep *sim.Report, durable int) {
	for _, r := range rep.Results {
		d := r.Diag
		n := d.FallbackAllowed + d.FallbackDenied
		if d.RoundErrors == 0 && n*100 <= uint64(r.Decisions) {
			continue
		}
		cause := "Redis did not answer the sync calls in time (too slow or unreachable)"
		if durable > 0 {
			cause = fmt.Sprintf("with -durable %d, the likely cause is a server with fewer than %d replica(s): each WAIT times out", durable, durable)
		}
		fmt.Fprintf(w, "sim: warning: %s: %d of %d sync rounds failed and %d of %d decisions were made by the failure policy (breaker opens %d); %s\n",
			r.Label(), d.RoundErrors, d.Rounds, n, r.Decisions, d.BreakerOpens, cause)
	}
}

// writeTable writes the report's table under two lines that say what ran
// and above a legend of its columns. The table's rows are
// Report.WriteTable's, unchanged, so that tables stay comparable.
func writeTable(w io.Writer, rep *sim.Report, o *options) error {
	title, load := describe(o)
	if _, err := fmt.Fprintf(w, "Scenario %s:\n%s.\n\n", title, upper(load)); err != nil {
		return err
	}
	if err := rep.WriteTable(w); err != nil {
		return err
	}
	_, err := io.WriteString(w, legend(o))
	return err
}

// describe says in words what a run of o simulates: the scenario and where
// Redis is (title), and the traffic (load).
func describe(o *options) (title, load string) {
	sc := o.cfg.Scenario
	switch {
	case !o.live:
		layout := "a cluster"
		if o.cfg.Standalone {
			layout = "one server"
		}
		title = fmt.Sprintf("%s, in virtual time on an embedded Redis modelled as %s (round trip %v), seed %d",
			sc.Workload, layout, o.cfg.RTT, sc.Seed)
	case len(o.target.Cluster) > 0:
		title = fmt.Sprintf("%s, live against a Redis Cluster (%d nodes given), seed %d", sc.Workload, len(o.target.Cluster), sc.Seed)
	default:
		title = fmt.Sprintf("%s, live against the Redis at %s, seed %d", sc.Workload, o.target.Addr, sc.Seed)
	}
	if o.live && o.target.Durable > 0 {
		title += fmt.Sprintf(", sync calls waiting for %d replica(s)", o.target.Durable)
	}
	var keys string
	switch sc.Workload {
	case sim.Hotspot:
		keys = fmt.Sprintf("%d keys drawn Zipf s=%g", sc.Keys, sc.ZipfS)
	case sim.Uniform:
		keys = fmt.Sprintf("%d keys drawn uniformly", sc.Keys)
	case sim.Flash:
		what := "demand"
		if o.live {
			what = "share of the draws"
		}
		keys = fmt.Sprintf("%d keys drawn uniformly, key 0's %s %gx from half time", sc.Keys, what, sc.Flash)
	case sim.SkewedLB:
		keys = fmt.Sprintf("%d keys drawn Zipf s=%g, %g%% of a key's requests on its home instance", sc.Keys, sc.ZipfS, 100*sc.Skew)
	}
	rate := fmt.Sprintf("%g requests/s", sc.Rate)
	if o.live {
		workers := "2 x GOMAXPROCS workers"
		if o.target.Workers > 0 {
			workers = fmt.Sprintf("%d workers", o.target.Workers)
		}
		rate = workers + " per instance asking as fast as they can"
	}
	load = fmt.Sprintf("%d instances, %s, %s for %v, every key %s burst %d",
		sc.Instances, keys, rate, sc.Duration, sc.Limit.WithBurst(sc.Limit.Rate), sc.Limit.Burst)
	return title, load
}

// legend explains the table's columns in a few words each.
func legend(o *options) string {
	per := o.cfg.Scenario.Limit.Period
	s := fmt.Sprintf(`
Every row decides the same requests. The oracle is one exact token bucket per key that sees every
request of every instance: what a perfect limiter admits.
  strategy       exact: one Redis script per request; local: each instance alone, with an equal
                 share of the limit; optimistic, reserve: the hybrid limiter's two modes;
                 reserve-sharded: reserve with hot keys split over several hash slots
  sync           the hybrid limiter's sync interval (- for the strategies that do not sync)
  decisions      requests decided; admitted: requests the strategy admitted
  oracle         requests the oracle admitted
  overshoot      admissions above the oracle's, summed over keys, as a share of the oracle's
                 total: the limit exceeded
  undershoot     requests refused that the oracle admitted, the same way: needless denials
  worst window   on the worst key, the most admissions in any %v window beyond burst + rate
                 (the most a token bucket ever admits in one), as a share of burst + rate
  redis cmds     Redis commands sent while deciding; cmds/decision: per request decided
  hottest slot   the busiest hash slot's share of Redis's work: of the key messages it ran (a
                 script on one key is one, a hybrid sync call carries many): the share one
                 Redis Cluster node carries, however many nodes there are
`, per)
	if o.live {
		s += `  decisions/s    decisions a second, all instances together; p50, p99: decision latency
  redis cpu/decision  the CPU the Redis servers spent over the run (INFO cpu, every node of a
                 cluster), per decision
`
	}
	return s
}

// runCount is the number of runs cfg makes: one per strategy that does
// not sync, one per sync interval for each that does.
func runCount(cfg sim.Config) int {
	n := 0
	for _, st := range cfg.Strategies {
		if st.Synced() {
			n += len(cfg.Intervals)
		} else {
			n++
		}
	}
	return n
}

// upper returns s with its first letter in upper case.
func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// runSweep runs a sweep of virtual runs (-scale, -tail: run, described
// by what on stderr) and writes its table (write) or its JSON.
func runSweep[T any](o *options, stdout, stderr io.Writer, start time.Time, what string,
	run func() (T, error), write func(io.Writer, T, *options) error) int {
	if o.progress {
		title, _ := describe(o)
		fmt.Fprintf(stderr, "sim: %s %s; each run is reported as it ends\n", title, what)
	}
	out, err := run()
	if err != nil {
		return fail(stderr, err)
	}
	if o.progress {
		fmt.Fprintf(stderr, "sim: done in %.1fs\n", time.Since(start).Seconds())
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(out)
	} else {
		err = write(stdout, out, o)
	}
	if err != nil {
		return fail(stderr, err)
	}
	return 0
}

// writeTail writes the table of a -tail run, with what it shows.
func writeTail(w io.Writer, tails []sim.Tail, o *options) error {
	title, load := describe(o)
	load = strings.Replace(load, fmt.Sprintf("%d keys", o.cfg.Scenario.Keys), "the keys of each row", 1)
	if _, err := fmt.Fprintf(w, "Scenario %s, over %d key counts:\n%s.\n\n", title, len(tails), upper(load)); err != nil {
		return err
	}
	if err := sim.WriteTailTable(w, tails); err != nil {
		return err
	}
	_, err := fmt.Fprint(w, `
  per key, instance, interval  decisions an instance makes of one key per sync interval, on
                 average: under about one, most of them are the first the instance makes of the key
                 in a while, and Reserve fetches for each, as the exact limiter asks Redis for each
  key msgs/decision  key messages Redis ran (a script on one key is one, a sync call one per key
                 it carries) per request decided: what Redis's CPU goes on
  presence/decision  the hybrid's presence calls per request decided: one an instance and sync
                 interval, whatever the keys and traffic
  cmds/decision  commands sent per request decided (a sync call carries several key messages)
  first sights/decision, overshoot, worst window: as in -scale's table and the default one
`)
	return err
}

// writeScales writes the table of a -scale run, with what it shows.
func writeScales(w io.Writer, scaled []sim.Scaled, o *options) error {
	title, load := describe(o)
	if _, err := fmt.Fprintf(w, "Scenario %s, at %d scales:\n%s; each scale multiplies the rate and every key's limit and burst.\n\n",
		title, len(scaled), upper(load)); err != nil {
		return err
	}
	if err := sim.WriteScaleTable(w, scaled); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, `
  cmds, cluster  Redis commands sent while deciding, on a cluster of %d masters; cmds/decision:
                 per request decided. One server: the same on one Redis server
  fetches        the share of the cluster's commands in rounds that decisions out of allowance
                 waited for: mostly a key an instance sees for the first time, which Reserve
                 must ask Redis about before it admits anything
  first sights/decision  requests that are the first an instance sees of a key, per request
                 decided: what their fetches would cost in commands per decision if each went
                 alone (fetches in flight together share a call)
  overshoot, undershoot, worst window: as in the default table (go run ./cmd/sim -h)
`, sim.ModelMasters)
	return err
}
