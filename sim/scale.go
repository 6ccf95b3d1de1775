package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	stdsync "sync"
	"text/tabwriter"
)

// Scaled is one scale of RunScales: the scenario with its request rate and
// every key's limit (rate and burst) multiplied by Scale, so that the same
// share of keys is over its limit, modelled as a cluster and as one
// server.
type Scaled struct {
	Scale float64 `json:"scale"`
	Rate  float64 `json:"rate"`  // requests a second, all keys
	Limit int64   `json:"limit"` // every key's, a second
	// FirstSights counts the requests that are the first an instance sees
	// of a key (the distinct instance-key pairs of the stream): Reserve
	// must ask Redis before it admits any of them, so without fetches
	// that share a call, each costs one command.
	FirstSights int64   `json:"first_sights"`
	Cluster     *Report `json:"cluster"`
	OneServer   *Report `json:"one_server"`
}

// RunScales runs cfg in virtual time at each scale, as a cluster and on one
// server (cfg.Standalone is ignored), and returns the reports in the order
// of scales. The exact strategy runs at the first scale only: it costs one
// script a decision at any scale, and a large scale of it takes long. The
// runs go GOMAXPROCS at once, each alone (cfg.Parallel is ignored), as
// RunVirtual's do by default.
func RunScales(ctx context.Context, cfg Config, scales []float64) ([]Scaled, error) {
	if len(scales) == 0 {
		return nil, errors.New("sim: no scale to run")
	}
	out := make([]Scaled, len(scales))
	var jobs []sweepRun
	for i, f := range scales {
		sc, err := scale(cfg.Scenario, f)
		if err != nil {
			return nil, err
		}
		first, err := firstSights(sc)
		if err != nil {
			return nil, err
		}
		out[i] = Scaled{Scale: f, Rate: sc.Rate, Limit: sc.Limit.Rate, FirstSights: first}
		c := cfg
		c.Scenario, c.Parallel, c.Progress = sc, 1, nil
		if i > 0 {
			c.Strategies = without(cfg.Strategies, Exact)
		}
		if len(c.Strategies) == 0 {
			continue
		}
		for _, standalone := range []bool{false, true} {
			c.Standalone = standalone
			store := &out[i].Cluster
			if standalone {
				store = &out[i].OneServer
			}
			jobs = append(jobs, sweepRun{c, store})
		}
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := runSweep(ctx, cfg.Progress, jobs); err != nil {
		return nil, err
	}
	return out, nil
}

// sweepRun is one virtual run of a sweep (RunScales, RunTail) and where its
// report goes.
type sweepRun struct {
	cfg   Config
	store **Report
}

// runSweep runs jobs in virtual time, GOMAXPROCS at once, each alone
// (its cfg.Parallel 1), as RunVirtual's runs go by default, and reports
// every run to progress as it ends.
func runSweep(ctx context.Context, progress func(done, total int, r Result), jobs []sweepRun) error {
	var (
		wg   stdsync.WaitGroup
		mu   stdsync.Mutex
		errs []error
		done int
		next = make(chan sweepRun)
	)
	total := 0
	for _, j := range jobs {
		total += len(plan(j.cfg.Strategies, j.cfg.Intervals))
	}
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				c := j.cfg
				c.Progress = func(_, _ int, r Result) {
					if progress != nil {
						mu.Lock()
						done++
						progress(done, total, r)
						mu.Unlock()
					}
				}
				rep, err := RunVirtual(ctx, c)
				mu.Lock()
				*j.store = rep
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// firstSights returns how many requests of sc's stream are the first an
// instance sees of a key. It keeps the pairs seen in a map, whose size
// follows the stream, not keys x instances (up to 10^10).
func firstSights(sc Scenario) (int64, error) {
	reqs, err := generate(sc)
	if err != nil {
		return 0, err
	}
	seen := make(map[int64]struct{})
	for _, r := range reqs {
		seen[int64(r.Key)*int64(sc.Instances)+int64(r.Inst)] = struct{}{}
	}
	return int64(len(seen)), nil
}

// scale returns sc with its rate and every key's limit multiplied by f.
func scale(sc Scenario, f float64) (Scenario, error) {
	l := sc.Limit
	if !(f > 0) || l.Period.Seconds() != 1 {
		return sc, fmt.Errorf("sim: scale %v of a limit of %v: want a positive scale of a limit per second", f, l)
	}
	rate, burst := math.Round(float64(l.Rate)*f), math.Round(float64(l.Burst)*f)
	if rate < 1 || burst < 1 || rate > 1<<40 || burst > 1<<40 {
		return sc, fmt.Errorf("sim: scale %v makes the limit %v/s burst %v", f, rate, burst)
	}
	sc.Rate *= f
	sc.Limit.Rate, sc.Limit.Burst = int64(rate), int64(burst)
	return sc, sc.Validate()
}

// firstSightsCell returns the first sights per decision of r for a
// table, or "-" for a strategy that does not fetch.
func (s Scaled) firstSightsCell(r Result) string {
	if !r.Strategy.Synced() {
		return "-"
	}
	return strconv.FormatFloat(s.FirstSightsPerDecision(r), 'f', 4, 64)
}

// FirstSightsPerDecision returns the first sights of the scale's stream
// per decision of r, one of its results.
func (s Scaled) FirstSightsPerDecision(r Result) float64 {
	if r.Decisions == 0 {
		return 0
	}
	return float64(s.FirstSights) / float64(r.Decisions)
}

func without(ss []Strategy, drop Strategy) []Strategy {
	var out []Strategy
	for _, s := range ss {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}

// ParseScales parses a comma list of scales, such as "1,10,100".
func ParseScales(s string) ([]float64, error) {
	return parseList(s, "scale %q is not a positive number", func(f string) (float64, bool) {
		x, err := strconv.ParseFloat(f, 64)
		return x, err == nil && x > 0 && !math.IsInf(x, 0)
	})
}

// parseList parses a comma list of items, each trimmed and read by parse,
// which reports whether it is good; a bad one is named by the format bad.
func parseList[T any](s, bad string, parse func(string) (T, bool)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		x, ok := parse(strings.TrimSpace(f))
		if !ok {
			return nil, fmt.Errorf("sim: "+bad, f)
		}
		out = append(out, x)
	}
	return out, nil
}

// WriteScaleTable writes one row per strategy and sync interval at each
// scale: the accuracy (of the cluster model; one server's differs only in
// its calls), the Redis commands as a cluster and on one server, the
// share of them in rounds that decisions out of allowance waited for
// (fetches: mostly keys an instance sees for the first time), and the
// first sights per decision, which is what fetches cost when none shares
// a call. A last line says how each row's commands grew from the first
// scale to the last.
func WriteScaleTable(w io.Writer, scaled []Scaled) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scale\trate/s\tlimit/s\tstrategy\tdecisions\tovershoot\tundershoot\tworst window\t"+
		"cmds, cluster\tcmds/decision\tfetches\tcmds, one server\tcmds/decision\tfirst sights/decision\t")
	first, last := map[string][2]int64{}, map[string][2]int64{}
	for _, s := range scaled {
		if s.Cluster == nil || s.OneServer == nil {
			continue
		}
		for i, r := range s.Cluster.Results {
			one := s.OneServer.Results[i]
			fetches := "-"
			if r.Strategy.Synced() && r.RedisCmds > 0 {
				fetches = pct(float64(r.FetchCmds) / float64(r.RedisCmds))
			}
			fmt.Fprintf(tw, "x%s\t%.0f\t%d\t%s\t%d\t%s\t%s\t%s\t%d\t%.4f\t%s\t%d\t%.4f\t%s\t\n",
				strconv.FormatFloat(s.Scale, 'g', -1, 64), s.Rate, s.Limit, r.Label(), r.Decisions,
				pct(r.OvershootRatio), pct(r.UndershootRatio), pct(r.WorstWindowOvershootRatio),
				r.RedisCmds, r.RedisCmdsPerDecision, fetches, one.RedisCmds, one.RedisCmdsPerDecision,
				s.firstSightsCell(r))
			cmds := [2]int64{r.RedisCmds, one.RedisCmds}
			if _, ok := first[r.Label()]; !ok {
				first[r.Label()] = cmds
			}
			last[r.Label()] = cmds
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(scaled) < 2 {
		return nil
	}
	var growth []string
	for _, r := range scaled[0].Cluster.Results {
		a, b := first[r.Label()], last[r.Label()]
		if !r.Strategy.Synced() || a[0] == 0 || a[1] == 0 {
			continue
		}
		growth = append(growth, fmt.Sprintf("%s %.2fx as a cluster, %.2fx on one server",
			r.Label(), float64(b[0])/float64(a[0]), float64(b[1])/float64(a[1])))
	}
	if len(growth) > 0 {
		_, err := fmt.Fprintf(w, "\nRedis commands from x%s to x%s: %s.\n",
			strconv.FormatFloat(scaled[0].Scale, 'g', -1, 64),
			strconv.FormatFloat(scaled[len(scaled)-1].Scale, 'g', -1, 64), strings.Join(growth, "; "))
		return err
	}
	return nil
}
