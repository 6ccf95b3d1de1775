package main

import (
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/hybridlimit/hybridlimit/sim"
)

//go:embed page.md.tmpl
var pageText string

// lowLimitTokens is the hybrid limiter's default low-limit threshold
// (sync.WithLowLimitThreshold): below it a key is decided per request.
const lowLimitTokens = 2

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"row":          func(s SimRun, strategy, interval string) (sim.Result, error) { return s.Row(strategy, interval) },
	"pct":          pct,
	"cmds":         func(x float64) string { return strconv.FormatFloat(x, 'g', 3, 64) },
	"tokens":       func(x float64) string { return strconv.FormatFloat(x, 'f', 0, 64) },
	"maxOver":      maxOver,
	"lowTokens":    func() int { return lowLimitTokens },
	"lowIntervals": lowIntervals,
	"simTable":     simTable,
	"scaleTable":   scaleTable,
	"tailTable":    tailTable,
	"scaled":       scaled,
	"firstSights":  firstSights,
	"liveTable":    liveTable,
	"benches": func(d *data) []BenchRun {
		return []BenchRun{d.HotPath, d.DenyEmpty, d.LocalBucket, d.LocalTable, d.Steady, d.SyncRound, d.RedisMem}
	},
	"benchTable":       benchTable,
	"scriptRatio":      scriptRatio,
	"scriptRatioApart": scriptRatioApart,
	"scriptParts":      scriptPartsOf,
	"bench":            func(b BenchRun, name string) (Bench, error) { return b.Get(name) },
	"median": func(b Bench, unit string) (string, error) {
		m, err := b.Median(unit)
		return num(m), err
	},
	"perSec":          perSec,
	"redisCPU":        redisCPU,
	"cpuRatio":        cpuRatio,
	"cpuTimes":        cpuTimes,
	"msgsPerCall":     msgsPerCall,
	"perKeyInterval":  perKeyInterval,
	"cpuPerMsg":       cpuPerMsg,
	"msgsPerDecision": msgsPerDecision,
	"speedup":         speedup,
	"p99":             func(r sim.Result) (string, error) { return latency(r.DecisionP99NS, r) },
	"cell":            cell,
}).Parse(pageText))

// pct prints a ratio in percent to two decimals; a positive ratio too
// small to show prints as <0.01%, as cmd/sim's table does.
func pct(x float64) string {
	s := strconv.FormatFloat(100*x, 'f', 2, 64)
	if x > 0 && s == "0.00" {
		return "<0.01%"
	}
	return s + "%"
}

// maxOver returns the largest overshoot among s's rows of strategy.
func maxOver(s SimRun, strategy string) (float64, error) {
	m, n := 0.0, 0
	for _, r := range s.Report.Results {
		if string(r.Strategy) == strategy {
			m, n = max(m, r.OvershootRatio), n+1
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("%s: no %s rows", s.Cmd, strategy)
	}
	return m, nil
}

// lowIntervals lists the sync intervals of s (the default hotspot
// scenario) at which a key's limit adds fewer than lowLimitTokens tokens
// per instance per interval.
func lowIntervals(s SimRun) string {
	sc := sim.DefaultScenario(sim.Hotspot)
	var ivs []string
	for _, r := range s.Report.Results {
		if r.Strategy != sim.Reserve || r.SyncIntervalMS == nil {
			continue
		}
		iv := time.Duration(*r.SyncIntervalMS * float64(time.Millisecond))
		if sc.Limit.TokensIn(iv)/float64(sc.Instances) < lowLimitTokens {
			ivs = append(ivs, iv.String())
		}
	}
	if len(ivs) == 0 {
		return "none of the intervals"
	}
	return strings.Join(ivs, " and ")
}

// interval returns a result's sync interval as the table prints it.
func interval(r sim.Result) string {
	if r.SyncIntervalMS == nil {
		return "-"
	}
	return time.Duration(*r.SyncIntervalMS * float64(time.Millisecond)).String()
}

// simTable renders a virtual run's results as a markdown table.
func simTable(s SimRun) string {
	var b strings.Builder
	b.WriteString("| strategy | sync | overshoot | undershoot | worst window | cmds/decision | hottest slot |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range s.Report.Results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.3f | %s |\n", r.Strategy, interval(r),
			pct(r.OvershootRatio), pct(r.UndershootRatio), pct(r.WorstWindowOvershootRatio), r.RedisCmdsPerDecision, pct(r.HottestSlotShare))
	}
	return strings.TrimRight(b.String(), "\n")
}

// scaleTable renders a -scale run as a markdown table: a row per scale and
// strategy, the accuracy of the cluster model, the commands per decision
// as a cluster and on one server, and the first sights per decision.
func scaleTable(s ScaleRun) string {
	var b strings.Builder
	b.WriteString("| scale | requests/s | limit/s | strategy | overshoot | undershoot | worst window | cmds/decision, cluster | of them fetches | cmds/decision, one server | first sights/decision |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, sc := range s.Scaled {
		for i, r := range sc.Cluster.Results {
			one := sc.OneServer.Results[i]
			fetches, first := "-", "-"
			if r.Strategy.Synced() && r.RedisCmds > 0 {
				fetches = pct(float64(r.FetchCmds) / float64(r.RedisCmds))
				first = firstSightsOf(sc, r)
			}
			fmt.Fprintf(&b, "| x%s | %s | %d | %s | %s | %s | %s | %.4f | %s | %.4f | %s |\n", num(sc.Scale), num(sc.Rate), sc.Limit,
				r.Label(), pct(r.OvershootRatio), pct(r.UndershootRatio), pct(r.WorstWindowOvershootRatio),
				r.RedisCmdsPerDecision, fetches, one.RedisCmdsPerDecision, first)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// tailTable renders a -tail run as a markdown table: a row per key count
// and strategy, how often an instance sees a key, the accuracy, and what
// Redis ran per decision: key messages, presence calls, commands.
func tailTable(r TailRun) string {
	var b strings.Builder
	b.WriteString("| keys | decisions per key, instance, interval | strategy | overshoot | worst window | key messages/decision | presence calls/decision | cmds/decision | first sights/decision |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range r.Tails {
		for _, res := range t.Report.Results {
			per, first, msgs, presence := "-", "-", 0.0, 0.0
			if res.SyncIntervalMS != nil {
				per = strconv.FormatFloat(t.PerInterval(res), 'g', 3, 64)
			}
			if res.Decisions > 0 {
				msgs = float64(res.KeyMessages) / float64(res.Decisions)
				presence = float64(res.PresenceCalls) / float64(res.Decisions)
				if res.Strategy.Synced() {
					first = strconv.FormatFloat(float64(t.FirstSights)/float64(res.Decisions), 'f', 4, 64)
				}
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %.4f | %.4f | %.4f | %s |\n", t.Keys, per, res.Label(),
				pct(res.OvershootRatio), pct(res.WorstWindowOvershootRatio), msgs, presence, res.RedisCmdsPerDecision, first)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// scaled returns the result of strategy at the scale-th scale of s, as a
// cluster or on one server.
func scaled(s ScaleRun, i int, label string, oneServer bool) (sim.Result, error) {
	sc, err := s.at(i)
	if err != nil {
		return sim.Result{}, err
	}
	rep := sc.Cluster
	if oneServer {
		rep = sc.OneServer
	}
	for _, r := range rep.Results {
		if r.Label() == label {
			return r, nil
		}
	}
	return sim.Result{}, fmt.Errorf("%s: no %s at scale %d", s.Cmd, label, i)
}

// firstSights returns the first sights per decision of r at the i-th
// scale of s (counted from the end when negative).
func firstSights(s ScaleRun, i int, r sim.Result) (string, error) {
	sc, err := s.at(i)
	if err != nil {
		return "", err
	}
	return firstSightsOf(sc, r), nil
}

// firstSightsOf prints the first sights per decision of r, a result at
// scale sc, to four decimals as the commands per decision beside it.
func firstSightsOf(sc sim.Scaled, r sim.Result) string {
	return strconv.FormatFloat(sc.FirstSightsPerDecision(r), 'f', 4, 64)
}

// at returns the i-th scale of s, counted from the end when i < 0.
func (s ScaleRun) at(i int) (sim.Scaled, error) {
	if i < 0 {
		i += len(s.Scaled)
	}
	if i < 0 || i >= len(s.Scaled) {
		return sim.Scaled{}, fmt.Errorf("%s: no scale %d", s.Cmd, i)
	}
	return s.Scaled[i], nil
}

// liveTable renders a live run's results as a markdown table.
func liveTable(s SimRun) (string, error) {
	var b strings.Builder
	b.WriteString("| strategy | sync | decisions/s | p50 | p99 | overshoot | undershoot | worst window | cmds/decision | " +
		"key messages/decision | Redis CPU/decision | Redis CPU/key message |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range s.Report.Results {
		rate, err := perSec(r)
		if err != nil {
			return "", err
		}
		p50, err := latency(r.DecisionP50NS, r)
		if err != nil {
			return "", err
		}
		p99, err := latency(r.DecisionP99NS, r)
		if err != nil {
			return "", err
		}
		cpu, err := redisCPU(r)
		if err != nil {
			return "", err
		}
		perMsg, err := cpuPerMsg(r)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %.4f | %s | %s | %s |\n", r.Strategy, interval(r), rate, p50, p99,
			pct(r.OvershootRatio), pct(r.UndershootRatio), pct(r.WorstWindowOvershootRatio), r.RedisCmdsPerDecision,
			msgsPerDecision(r), cpu, perMsg)
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

// redisCPU prints a live result's Redis CPU per decision: 293ns, 45.6µs.
func redisCPU(r sim.Result) (string, error) {
	if r.RedisCPUPerDecisionNS == nil {
		return "", fmt.Errorf("%s: no Redis CPU (not a live run?)", r.Label())
	}
	return threeFigures(time.Duration(*r.RedisCPUPerDecisionNS)), nil
}

// cpuPerMsg prints the Redis CPU a live result spent per key message (see
// sim.Result.KeyMessages): for an exact strategy, a decision's script; for
// the hybrid limiter, one key's part of a sync call.
func cpuPerMsg(r sim.Result) (string, error) {
	if r.RedisCPUPerDecisionNS == nil || r.KeyMessages <= 0 {
		return "", fmt.Errorf("%s: no Redis CPU or no key messages (not a live run?)", r.Label())
	}
	return threeFigures(time.Duration(*r.RedisCPUPerDecisionNS * float64(r.Decisions) / float64(r.KeyMessages))), nil
}

// msgsPerDecision prints a result's key messages per decision, to three
// significant figures: 1, 0.00412.
func msgsPerDecision(r sim.Result) string {
	if r.Decisions == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(r.KeyMessages)/float64(r.Decisions), 'g', 3, 64)
}

// threeFigures prints d to three significant figures: 293ns, 45.6µs.
func threeFigures(d time.Duration) string {
	unit := time.Duration(1)
	for d/unit >= 1000 {
		unit *= 10
	}
	return d.Round(unit).String()
}

// cpuRatio prints how many times less Redis CPU a decides than b: "1/156".
func cpuRatio(a, b sim.Result) (string, error) {
	if a.RedisCPUPerDecisionNS == nil || b.RedisCPUPerDecisionNS == nil || *a.RedisCPUPerDecisionNS <= 0 {
		return "", fmt.Errorf("%s, %s: no Redis CPU to compare", a.Label(), b.Label())
	}
	return fmt.Sprintf("1/%.0f", *b.RedisCPUPerDecisionNS / *a.RedisCPUPerDecisionNS), nil
}

// cpuTimes prints a's Redis CPU per decision as a multiple of b's: "0.74x".
func cpuTimes(a, b sim.Result) (string, error) {
	if a.RedisCPUPerDecisionNS == nil || b.RedisCPUPerDecisionNS == nil || *b.RedisCPUPerDecisionNS <= 0 {
		return "", fmt.Errorf("%s, %s: no Redis CPU to compare", a.Label(), b.Label())
	}
	return times(*a.RedisCPUPerDecisionNS / *b.RedisCPUPerDecisionNS), nil
}

// times prints a ratio to two decimals: "0.74x".
func times(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) + "x" }

// msgsPerCall prints the key messages a hybrid result's calls carried on
// average, presence calls left out: 2.3.
func msgsPerCall(r sim.Result) (string, error) {
	calls := r.RedisCmds - r.PresenceCalls
	if calls <= 0 {
		return "", fmt.Errorf("%s: no sync calls", r.Label())
	}
	return strconv.FormatFloat(float64(r.KeyMessages)/float64(calls), 'f', 1, 64), nil
}

// perKeyInterval prints the decisions a live result made of each of keys
// keys, on each instance, in each sync interval: 0.0083.
func perKeyInterval(r sim.Result, keys int) (string, error) {
	if r.DecisionsPerSec == nil || r.SyncIntervalMS == nil || keys <= 0 || r.Instances <= 0 {
		return "", fmt.Errorf("%s: not a live hybrid result", r.Label())
	}
	x := *r.DecisionsPerSec * *r.SyncIntervalMS / 1000 / float64(keys) / float64(r.Instances)
	return strconv.FormatFloat(x, 'g', 2, 64), nil
}

// perSec prints a live result's decisions a second: 2.39M, 33.1k.
func perSec(r sim.Result) (string, error) {
	if r.DecisionsPerSec == nil {
		return "", fmt.Errorf("%s: no decisions/s (not a live run)", r.Label())
	}
	x := *r.DecisionsPerSec
	switch {
	case x >= 1e6:
		return strconv.FormatFloat(x/1e6, 'f', 2, 64) + "M", nil
	case x >= 1e3:
		return strconv.FormatFloat(x/1e3, 'f', 1, 64) + "k", nil
	}
	return strconv.FormatFloat(x, 'f', 0, 64), nil
}

// speedup prints how many times a's decisions a second are b's: 38x,
// 2.4x.
func speedup(a, b sim.Result) (string, error) {
	if a.DecisionsPerSec == nil || b.DecisionsPerSec == nil || *b.DecisionsPerSec == 0 {
		return "", fmt.Errorf("%s, %s: no decisions/s to compare", a.Label(), b.Label())
	}
	x, digits := *a.DecisionsPerSec / *b.DecisionsPerSec, 0
	if x < 10 {
		digits = 1 // 2.4x, not 2x
	}
	return strconv.FormatFloat(x, 'f', digits, 64) + "x", nil
}

// latency prints a live result's latency to three significant digits:
// 187ns, 69.9µs, 60.2ms.
func latency(ns *int64, r sim.Result) (string, error) {
	if ns == nil {
		return "", fmt.Errorf("%s: no latency (not a live run)", r.Label())
	}
	x := float64(*ns)
	for _, u := range []struct {
		name string
		ns   float64
	}{{"s", 1e9}, {"ms", 1e6}, {"µs", 1e3}} {
		if x >= u.ns {
			return strconv.FormatFloat(x/u.ns, 'g', 3, 64) + u.name, nil
		}
	}
	return strconv.FormatFloat(x, 'f', 0, 64) + "ns", nil
}

// benchTable renders a benchmark run as a markdown table: a row per
// benchmark, a column per unit, each cell the median and the range.
func benchTable(b BenchRun) string {
	var units []string
	for _, r := range b.Results {
		for _, u := range r.Units() {
			if !slices.Contains(units, u) {
				units = append(units, u)
			}
		}
	}
	var s strings.Builder
	s.WriteString("| benchmark | runs |")
	for _, u := range units {
		s.WriteString(" " + u + " |")
	}
	s.WriteString("\n|---|---|" + strings.Repeat("---|", len(units)) + "\n")
	for _, r := range b.Results {
		runs := 0
		for _, v := range r.Values {
			runs = max(runs, len(v))
		}
		fmt.Fprintf(&s, "| %s | %d |", strings.TrimPrefix(r.Name, "Benchmark"), runs)
		for _, u := range units {
			m, err := r.Median(u)
			switch {
			case err != nil:
				s.WriteString(" |")
			case slices.Min(r.Values[u]) == slices.Max(r.Values[u]):
				s.WriteString(" " + num(m) + " |")
			default:
				s.WriteString(" " + num(m) + " (" + r.Range(u) + ") |")
			}
		}
		s.WriteString("\n")
	}
	return strings.TrimRight(s.String(), "\n")
}

// cell escapes the pipes of s for a markdown table cell, code spans
// included.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// scriptRatio returns BenchmarkSyncScript's message over its floor in the
// server's CPU per key message, 256 messages a call, the two run in turn
// (paired): what the script's own work adds to the two calls a message
// cannot do without.
func scriptRatio(b BenchRun) (string, error) {
	p, err := scriptPartsOf(b)
	if err != nil {
		return "", err
	}
	return times(p.Message / p.Floor), nil
}

// scriptRatioApart returns the same ratio from the medians of the message
// and the floor run one after the other.
func scriptRatioApart(b BenchRun) (string, error) {
	var med [2]float64
	for i, part := range []string{"message", "floor"} {
		r, err := b.Get("BenchmarkSyncScript/" + part + "/keys=256")
		if err != nil {
			return "", err
		}
		if med[i], err = r.Median("redis-cpu-us/key"); err != nil {
			return "", err
		}
	}
	if med[1] <= 0 {
		return "", fmt.Errorf("%s: a floor of %v", b.Cmd, med[1])
	}
	return times(med[0] / med[1]), nil
}

// scriptParts are the server's CPU per key message, in microseconds, 256
// messages a call, of BenchmarkSyncScript's paired run: the median floor,
// and the message, the stretchless message and the wire as the floor times
// their median ratios to it.
type scriptParts struct{ Message, Stretchless, Wire, Floor float64 }

// Formats is what reading and writing the stored and wire formats costs
// a message (wire over floor); Logic what the script's logic does (message
// over wire); Stretches what of the message the stretch a top-up of a full
// bucket records costs (message over stretchless).
func (p scriptParts) Formats() string   { return num(p.Wire-p.Floor) + " µs" }
func (p scriptParts) Logic() string     { return num(p.Message-p.Wire) + " µs" }
func (p scriptParts) Above() string     { return num(p.Message-p.Floor) + " µs" }
func (p scriptParts) Stretches() string { return num(p.Message-p.Stretchless) + " µs" }

// StretchlessRatio is the stretchless message over the floor.
func (p scriptParts) StretchlessRatio() string { return times(p.Stretchless / p.Floor) }

func scriptPartsOf(b BenchRun) (scriptParts, error) {
	r, err := b.Get("BenchmarkSyncScript/paired/keys=256")
	if err != nil {
		return scriptParts{}, err
	}
	var med [4]float64
	for i, unit := range []string{"floor-cpu-us/key", "x-floor", "wire-x-floor", "stretchless-x-floor"} {
		if med[i], err = r.Median(unit); err != nil {
			return scriptParts{}, err
		}
	}
	if med[0] <= 0 {
		return scriptParts{}, fmt.Errorf("%s: a floor of %v", b.Cmd, med[0])
	}
	return scriptParts{Message: med[1] * med[0], Stretchless: med[3] * med[0], Wire: med[2] * med[0], Floor: med[0]}, nil
}
