package sync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	stdsync "sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// The fleet tests run several OS processes, each one hybrid limiter on a
// cluster, under a skewed load, log every decision per key, and inject a
// fault into the cluster meanwhile. The processes are this test binary run
// again with TestFleetWorker selected and fleetEnv naming its work.

// fleetEnv carries a worker's configuration, JSON, to the re-run binary.
const fleetEnv = "HYBRIDLIMIT_FLEET_WORKER"

// fleetBucket is the time resolution of a worker's log, and fleetSlack
// how long past its run a log reaches: a worker starved of CPU finishes its
// decisions late.
const (
	fleetBucket = 100 * time.Millisecond
	fleetSlack  = 5 * time.Second
)

type fleetConfig struct {
	Addrs    []string
	Prefix   string
	ID       string
	Policy   hybridlimit.FailurePolicy
	Mode     hlsync.Mode
	Budget   float64 // WithOvershootBudget when above 0
	Interval time.Duration
	Keys     []string // by popularity, the hottest first
	Zipf     float64
	Rate     int // decisions per second
	Workers  int
	Start    time.Time // wall clock, shared by the fleet
	Run      time.Duration
	Seed     uint64
	Out      string
}

// fleetLog is one worker's decisions, per key and per fleetBucket since
// the fleet's start.
type fleetLog struct {
	Admitted    [][]int64 // cost admitted (by allowance, Redis or the fallback)
	Denied      [][]int64 // denied by the limit: err == nil, not SourceFallback
	Degraded    [][]int64 // denied by the failure policy: SourceFallback
	Errors      int64
	FirstError  string
	Late        int64         // decisions that began after their scheduled time by more than a second
	Last        time.Duration // when the last decision ended, since the fleet's start
	Stats       hlsync.Stats
	MaxDecision time.Duration
}

// fleetLimit is the limit of the key of popularity rank i: most 100/s, a
// few 600 and 6000 a minute, as a service with tiers might have.
func fleetLimit(i int) hybridlimit.Limit {
	switch {
	case i%25 == 5:
		return hybridlimit.PerMinute(6000)
	case i%10 == 3:
		return hybridlimit.PerMinute(600)
	}
	return hybridlimit.PerSecond(100)
}

// TestFleetWorker is a worker of a fleet test; run directly it skips.
func TestFleetWorker(t *testing.T) {
	var cfg fleetConfig
	workerConfig(t, fleetEnv, &cfg)
	log, err := runFleetWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Out, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

func runFleetWorker(cfg fleetConfig) (*fleetLog, error) {
	// go-redis logs each dial that a dead master refuses; the fleet's
	// logs say what matters.
	redis.SetLogger(quietLogger{})
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Addrs, ContextTimeoutEnabled: true})
	defer rdb.Close()
	opts := []hlsync.Option{
		hlsync.WithPrefix(cfg.Prefix), hlsync.WithInstanceID(cfg.ID),
		hlsync.WithSyncInterval(cfg.Interval, 0.1), hlsync.WithFailurePolicy(cfg.Policy), hlsync.WithMode(cfg.Mode),
	}
	if cfg.Budget > 0 {
		opts = append(opts, hlsync.WithOvershootBudget(cfg.Budget))
	}
	lim, err := hlsync.New(rdb, opts...)
	if err != nil {
		return nil, err
	}
	if err := lim.Start(); err != nil {
		return nil, err
	}
	buckets := int((cfg.Run+fleetSlack)/fleetBucket) + 1
	grid := func() [][]int64 {
		g := make([][]int64, len(cfg.Keys))
		for i := range g {
			g[i] = make([]int64, buckets)
		}
		return g
	}
	log := &fleetLog{Admitted: grid(), Denied: grid(), Degraded: grid()}
	var mu stdsync.Mutex
	var next atomic.Int64
	end := cfg.Start.Add(cfg.Run)
	step := time.Second / time.Duration(cfg.Rate)
	var wg stdsync.WaitGroup
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
			zipf := rand.NewZipf(rng, cfg.Zipf, 1, uint64(len(cfg.Keys)-1))
			mine := &fleetLog{Admitted: grid(), Denied: grid(), Degraded: grid()}
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				for k := range cfg.Keys {
					for b := range buckets {
						log.Admitted[k][b] += mine.Admitted[k][b]
						log.Denied[k][b] += mine.Denied[k][b]
						log.Degraded[k][b] += mine.Degraded[k][b]
					}
				}
				log.Errors += mine.Errors
				log.Late += mine.Late
				log.MaxDecision = max(log.MaxDecision, mine.MaxDecision)
				log.Last = max(log.Last, mine.Last)
				if log.FirstError == "" {
					log.FirstError = mine.FirstError
				}
			}()
			for {
				at := cfg.Start.Add(time.Duration(next.Add(1)-1) * step)
				if !at.Before(end) {
					return
				}
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
				} else if d < -time.Second {
					mine.Late++
				}
				k := int(zipf.Uint64())
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				began := time.Now()
				r, err := lim.Allow(ctx, cfg.Keys[k], fleetLimit(k))
				cancel()
				done := time.Now()
				mine.MaxDecision = max(mine.MaxDecision, done.Sub(began))
				mine.Last = max(mine.Last, done.Sub(cfg.Start))
				b := min(max(int(done.Sub(cfg.Start)/fleetBucket), 0), buckets-1)
				switch {
				case err != nil:
					mine.Errors++
					if mine.FirstError == "" {
						mine.FirstError = err.Error()
					}
				case r.Allowed:
					mine.Admitted[k][b]++
				case r.Source == hybridlimit.SourceFallback:
					mine.Degraded[k][b]++
				default:
					mine.Denied[k][b]++
				}
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closeErr := lim.Close(ctx)
	log.Stats = lim.Stats()
	if closeErr != nil {
		return log, fmt.Errorf("close: %w", closeErr)
	}
	return log, nil
}

// startWorker runs this test binary again as another OS process, with
// only the test named test selected and cfg, as JSON, in the environment
// variable env; it dies with the test.
func startWorker(t *testing.T, test, env string, cfg any) *exec.Cmd {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), env+"="+string(raw))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// workerConfig reads into cfg the configuration a worker's test gets as
// JSON in the environment variable env (startWorker); run directly, the
// test is not a worker, and skips.
func workerConfig(t *testing.T, env string, cfg any) {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		t.Skip("a worker process: run by the test that starts it")
	}
	if err := json.Unmarshal([]byte(raw), cfg); err != nil {
		t.Fatal(err)
	}
}

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// fleet is one fleet run's shape.
type fleet struct {
	Processes int
	Rate      int // decisions per second per process
	Run       time.Duration
	FaultAt   time.Duration
	Policy    hybridlimit.FailurePolicy
	Mode      hlsync.Mode
	Budget    float64
	Interval  time.Duration
}

// fleetShape returns the fleet the tests run: a small one by default, and
// the size of a production trial (4 processes of 10,000 decisions a second
// for 20 s, the fault at 10 s) with HYBRIDLIMIT_FLEET_FULL=1.
func fleetShape(policy hybridlimit.FailurePolicy, mode hlsync.Mode, budget float64) fleet {
	f := fleet{Processes: 3, Rate: 2000, Run: 8 * time.Second, FaultAt: 3 * time.Second,
		Policy: policy, Mode: mode, Budget: budget, Interval: 200 * time.Millisecond}
	if os.Getenv("HYBRIDLIMIT_FLEET_FULL") == "1" {
		f.Processes, f.Rate, f.Run, f.FaultAt = 4, 10000, 20*time.Second, 10*time.Second
	}
	return f
}

// fleetKeys returns 200 key names by popularity. The hottest shares its
// master with the presence record, so that the master the tests fault
// holds both, the worst case for a fleet.
func fleetKeys(t *testing.T, cl *redistest.ClusterServers, prefix string) []string {
	t.Helper()
	probe, err := hlsync.New(cl.Client(t), hlsync.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	presence, _ := cl.SlotOwner(t, hybridlimit.Slot(prefix+"{presence}:instances"))
	owners := redistest.SlotOwners(t, cl.Client(t))
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
	}
	for n := 0; ; n++ {
		hot := fmt.Sprintf("hot%d", n)
		bucket, _ := probe.Keys(hot)
		if owners[hybridlimit.Slot(bucket)] == presence.Addr {
			keys[0] = hot
			return keys
		}
	}
}

// runFleet starts the fleet's processes on cl, calls fault at FaultAt
// into the run, waits for the processes, and returns their logs.
func runFleet(t *testing.T, cl *redistest.ClusterServers, prefix string, keys []string, f fleet, fault func()) []*fleetLog {
	t.Helper()
	dir := t.TempDir()
	start := time.Now().Add(500 * time.Millisecond) // every process up and connected
	cmds := make([]*exec.Cmd, f.Processes)
	outs := make([]string, f.Processes)
	for i := range cmds {
		outs[i] = filepath.Join(dir, fmt.Sprintf("w%d.json", i))
		cmds[i] = startWorker(t, "TestFleetWorker", fleetEnv, fleetConfig{
			Addrs: cl.Addrs(), Prefix: prefix, ID: fmt.Sprintf("w%d", i),
			Policy: f.Policy, Mode: f.Mode, Budget: f.Budget, Interval: f.Interval,
			Keys: keys, Zipf: 1.1, Rate: f.Rate, Workers: 4,
			Start: start, Run: f.Run, Seed: uint64(i + 1), Out: outs[i],
		})
	}
	time.Sleep(time.Until(start.Add(f.FaultAt)))
	fault()
	logs := make([]*fleetLog, f.Processes)
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		raw, err := os.ReadFile(outs[i])
		if err != nil {
			t.Fatal(err)
		}
		logs[i] = new(fleetLog)
		if err := json.Unmarshal(raw, logs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return logs
}

// fleetReport sums a fleet's logs and holds each key against its bounds.
type fleetReport struct {
	budget, over         int64 // over B + r T, summed over keys
	overHealthy          int64 // the same for keys whose master stayed up
	worstKey             string
	worstOver            float64  // the worst key's admitted / (B + r T) - 1
	windowOver           int64    // tokens above the window bound, worst window of each key, summed
	windowAt             []string // where: key+tokens@seconds the worst window ended, its length
	falseDenials         int64    // limit denials of keys whose demand was under half their rate in the second before
	falseAt              []string // where: key@seconds
	degraded, denied     int64
	errors               int64
	maxDecision          time.Duration
	span                 time.Duration // from the start to the last decision's end: T
	late                 int64
	fallbackAllowed      uint64
	breakerOpens, owedIn uint64
}

func (r fleetReport) String() string {
	return fmt.Sprintf("over B+rT %d of %d tokens (%.3f%%), on healthy masters %d; worst key %s %+.1f%%; window bound exceeded by %d %v; "+
		"limit denials of cold keys %d %v; policy denials %d, limit denials %d, errors %d; slowest decision %v; T %v, decisions late by over 1s %d; "+
		"fallback admitted %d; breaker opens %d",
		r.over, r.budget, 100*float64(r.over)/float64(r.budget), r.overHealthy, r.worstKey, 100*r.worstOver, r.windowOver, r.windowAt,
		r.falseDenials, r.falseAt, r.degraded, r.denied, r.errors, r.maxDecision, r.span.Round(time.Millisecond), r.late,
		r.fallbackAllowed, r.breakerOpens)
}

// analyse holds every key's admissions against B + r T over the run, T
// from the start to the last decision's end (a worker starved of CPU ends
// late, and the buckets refill meanwhile), and against design 6.3's window
// bound for Reserve, B + r(T + k I) + B/2 with k = 2 lease intervals, over
// windows of 1 s and of the whole run. A limit denial is false when the
// fleet asked for the key less than half its rate in the second up to it
// (a starved worker catching up asks in bursts). faulted says which keys'
// master the fault touched.
func analyse(logs []*fleetLog, keys []string, f fleet, faulted func(key string) bool) fleetReport {
	r := fleetReport{span: f.Run}
	for _, l := range logs {
		r.span = max(r.span, l.Last)
		r.late += l.Late
	}
	buckets := len(logs[0].Admitted[0])
	second := int(time.Second / fleetBucket)
	for k, key := range keys {
		limit := fleetLimit(k)
		rate := float64(limit.Rate) / limit.Period.Seconds()
		admitted := make([]int64, buckets)
		demand := make([]int64, buckets)
		for _, l := range logs {
			for b := range admitted {
				admitted[b] += l.Admitted[k][b]
				demand[b] += l.Admitted[k][b] + l.Denied[k][b] + l.Degraded[k][b]
			}
		}
		var all int64
		for _, a := range admitted {
			all += a
		}
		extra := f.Budget * float64(limit.Burst) // Optimistic's budget
		budget := limit.Burst + int64(math.Floor(rate*r.span.Seconds()+extra))
		r.budget += budget
		if over := all - budget; over > 0 {
			r.over += over
			if !faulted(key) {
				r.overHealthy += over
			}
		}
		if x := float64(all)/float64(budget) - 1; r.worstKey == "" || x > r.worstOver {
			r.worstKey, r.worstOver = key, x
		}
		// Window bound: the worst window of each length.
		var worst int64
		worstAt := ""
		for _, w := range []int{second, buckets} {
			bound := float64(limit.Burst) + rate*(float64(w)*fleetBucket.Seconds()+2*f.Interval.Seconds()) + float64(limit.Burst)/2
			if f.Mode == hlsync.Optimistic {
				bound = float64(limit.Burst) + rate*float64(w)*fleetBucket.Seconds() + extra
				if faulted(key) {
					// Design 6.3, lost writes: allowances the faulted
					// master granted and lost come on top, at most one
					// pool (the bucket plus f B).
					bound += float64(limit.Burst) + extra
				}
			}
			var sum int64
			for b := range admitted {
				sum += admitted[b]
				if b >= w {
					sum -= admitted[b-w]
				}
				if over := sum - int64(bound); over > worst {
					worst = over
					worstAt = fmt.Sprintf("%s+%d@%.1fs/%.1fs", key, over, float64(b+1)*fleetBucket.Seconds(), float64(min(w, b+1))*fleetBucket.Seconds())
				}
			}
		}
		r.windowOver += worst
		if worst > 0 {
			r.windowAt = append(r.windowAt, worstAt)
		}
		var asked int64 // in the second up to bucket b
		for b := range admitted {
			asked += demand[b]
			if b >= second {
				asked -= demand[b-second]
			}
			seen := time.Duration(min(b+1, second)) * fleetBucket // the run's first second is shorter
			cold := float64(asked) < rate/2*seen.Seconds()
			for _, l := range logs {
				if cold && l.Denied[k][b] > 0 {
					r.falseDenials += l.Denied[k][b]
					r.falseAt = append(r.falseAt, fmt.Sprintf("%s@%.1fs", key, float64(b)*fleetBucket.Seconds()))
				}
				r.denied += l.Denied[k][b]
				r.degraded += l.Degraded[k][b]
			}
		}
	}
	for _, l := range logs {
		r.errors += l.Errors
		r.maxDecision = max(r.maxDecision, l.MaxDecision)
		r.fallbackAllowed += l.Stats.FallbackAllowed
		r.breakerOpens += l.Stats.BreakerOpens
	}
	return r
}

// TestFleetFailover runs a fleet of processes with the default failure
// policy, FailClosed and Optimistic with a budget, and faults the master of
// the hottest key (and of the presence record) a few seconds in: SIGKILL,
// SIGSTOP for 3 s, and a promotion of its replica with CLUSTER FAILOVER.
// Every key must stay within B + r T over the run, keys whose master
// stayed up exactly; no key beyond design 6.3's window bound; no limit
// denial of a key whose demand is far under its limit (a denial Redis's
// absence caused must come from the failure policy, SourceFallback); no
// error.
func TestFleetFailover(t *testing.T) {
	defaultBuildOnly(t)
	if testing.Short() {
		t.Skip("several processes for several seconds each")
	}
	redistest.NoLeaksAfterKill(t)
	faults := []struct {
		name  string
		apply func(t *testing.T, cl *redistest.ClusterServers, master *redistest.Server, slot int) func()
	}{
		{"kill", func(t *testing.T, cl *redistest.ClusterServers, master *redistest.Server, slot int) func() {
			return func() {
				if err := master.Signal(syscall.SIGKILL); err != nil {
					t.Error(err)
				}
			}
		}},
		{"stop3s", func(t *testing.T, cl *redistest.ClusterServers, master *redistest.Server, slot int) func() {
			return func() {
				if err := master.Signal(syscall.SIGSTOP); err != nil {
					t.Error(err)
				}
				time.AfterFunc(3*time.Second, func() { _ = master.Signal(syscall.SIGCONT) })
			}
		}},
		{"failover", func(t *testing.T, cl *redistest.ClusterServers, master *redistest.Server, slot int) func() {
			_, replicas := cl.SlotOwner(t, slot)
			return func() { cl.Failover(t, replicas[0], slot) }
		}},
	}
	policies := []struct {
		name   string
		policy hybridlimit.FailurePolicy
		mode   hlsync.Mode
		budget float64
	}{
		{"fallback", hybridlimit.FallbackLocal, hlsync.Reserve, 0},
		{"closed", hybridlimit.FailClosed, hlsync.Reserve, 0},
		{"optimistic", hybridlimit.FallbackLocal, hlsync.Optimistic, 0.2},
	}
	for _, fault := range faults {
		for _, p := range policies {
			t.Run(fault.name+"/"+p.name, func(t *testing.T) {
				t.Parallel() // each its own cluster and processes; -parallel says how many at once
				cl := redistest.NewClusterWith(t, "cluster-node-timeout 1000")
				prefix := redistest.Prefix(t)
				keys := fleetKeys(t, cl, prefix)
				probe, err := hlsync.New(cl.Client(t), hlsync.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				hotBucket, _ := probe.Keys(keys[0])
				slot := hybridlimit.Slot(hotBucket)
				master, _ := cl.SlotOwner(t, slot)
				owners := redistest.SlotOwners(t, cl.Client(t))
				faulted := func(key string) bool {
					b, _ := probe.Keys(key)
					return owners[hybridlimit.Slot(b)] == master.Addr
				}
				f := fleetShape(p.policy, p.mode, p.budget)
				logs := runFleet(t, cl, prefix, keys, f, fault.apply(t, cl, master, slot))
				r := analyse(logs, keys, f, faulted)
				t.Logf("%s", r)
				if r.errors > 0 {
					t.Errorf("%d decisions returned an error", r.errors)
				}
				if r.overHealthy > 0 {
					t.Errorf("keys on masters the fault did not touch: %d tokens over B + r T, want 0", r.overHealthy)
				}
				if limit := r.budget / 500; r.over > limit { // 0.2 %
					t.Errorf("%d tokens over B + r T of %d, want at most %d (0.2%%)", r.over, r.budget, limit)
				}
				if r.windowOver > 0 {
					t.Errorf("window bound exceeded by %d tokens in all", r.windowOver)
				}
				if r.falseDenials > 0 && p.mode == hlsync.Reserve {
					t.Errorf("%d limit denials of keys far under their limit: Redis's absence answered as a quota denial", r.falseDenials)
				}
			})
		}
	}
}
