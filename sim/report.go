package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a simulation: one Result per strategy and sync
// interval, over one scenario's arrival stream.
type Report struct {
	Scenario Workload `json:"scenario"`
	Mode     string   `json:"mode"` // "virtual" or "live"
	Seed     uint64   `json:"seed"`
	Results  []Result `json:"results"`
}

// Result is one strategy at one sync interval. Ratios are rounded to six
// decimals so that a report is stable to print and compare, a nonzero
// ratio to at least 1e-6, so that it never reads 0.
type Result struct {
	Strategy Strategy `json:"strategy"`
	// SyncIntervalMS is null for strategies that do not sync (exact, local),
	// which run once per report.
	SyncIntervalMS *float64 `json:"sync_interval_ms"`
	Instances      int      `json:"instances"`
	Decisions      int64    `json:"decisions"`
	Admitted       int64    `json:"admitted"`
	OracleAdmitted int64    `json:"oracle_admitted"`
	// OvershootRatio is the sum over keys of the admissions above the
	// oracle's, max(0, admitted - oracle), divided by the oracle's total:
	// the share of admissions an exact limiter would have refused.
	// UndershootRatio is the same the other way: false rejections.
	// WorstWindowOvershootRatio is the largest excess, over keys and over
	// closed windows of one period, of the admissions above what a token
	// bucket can ever admit in such a window (Burst + Rate), relative to
	// that bound; 0 when no window exceeds it. It is blind to excess that
	// stays within that bound per period, such as 1.9 x Burst at one
	// instant or 1.9 x Rate sustained; OvershootRatio counts those.
	OvershootRatio            float64 `json:"overshoot_ratio"`
	UndershootRatio           float64 `json:"undershoot_ratio"`
	WorstWindowOvershootRatio float64 `json:"worst_window_overshoot_ratio"`
	// MostOverBound is the most tokens one key was admitted above B + r T,
	// Burst plus Rate over the run's length T: what any token bucket under
	// the limit can admit in the run, so an excess no timing of the
	// arrivals explains; 0 when no key went above it.
	MostOverBound float64 `json:"most_over_bound"`
	// RedisCmds counts the commands the strategy sent while deciding
	// (setup and teardown excluded), as the clients sent them: not the
	// commands a client sends on its own to set up a connection or follow
	// the slot map.
	RedisCmds            int64   `json:"redis_cmds"`
	RedisCmdsPerDecision float64 `json:"redis_cmds_per_decision"`
	// HottestSlotShare is the busiest hash slot's share of the key
	// messages Redis ran (a script on one key is one, a hybrid sync call
	// carries one per key): the share of Redis's work that one slot, so
	// one cluster node, cannot shed.
	HottestSlotShare float64 `json:"hottest_slot_share"`
	// KeyMessages counts the key messages Redis ran (a script on one key
	// is one, a hybrid sync call one per key it carries) and the keyless
	// commands: what Redis's CPU time is spent on, but for the hybrid's
	// presence calls, counted apart.
	KeyMessages int64 `json:"key_messages"`
	// PresenceCalls counts the hybrid's presence calls: one an instance
	// and sync interval, whatever the keys and traffic.
	PresenceCalls int64 `json:"presence_calls"`
	// Calls counts a contender's network calls (ContenderRun.Calls) in
	// live mode; a strategy's are its RedisCmds.
	Calls int64 `json:"calls,omitempty"`
	// Nodes is the load of each Redis node: the masters of the modelled
	// cluster in virtual mode (one server with Config.Standalone), the
	// masters of a live cluster in the order of their slots, or the one
	// live server.
	Nodes []NodeLoad `json:"nodes"`
	// FetchCmds counts the commands of the rounds that decisions out of
	// allowance waited for (a synced strategy in virtual mode; else 0).
	FetchCmds int64 `json:"fetch_cmds"`
	// Live mode only; null in virtual mode.
	DecisionsPerSec *float64 `json:"decisions_per_sec"`
	DecisionP50NS   *int64   `json:"decision_p50_ns"`
	DecisionP99NS   *int64   `json:"decision_p99_ns"`
	// RedisCPUPerDecisionNS is the CPU time the Redis servers spent (INFO
	// cpu, user and system, every node of a cluster) over the run, per
	// decision, in nanoseconds.
	RedisCPUPerDecisionNS *float64 `json:"redis_cpu_ns_per_decision"`

	// Diag sums the hybrid limiters' counters (zero for other strategies).
	Diag Diagnostics `json:"-"`
	// perKey is each key's demand and admissions, for Report.WriteDiag.
	perKey []keyCount
	// Elapsed is the wall time the run took.
	Elapsed time.Duration `json:"-"`
}

// NodeLoad is what one Redis node ran in a run. Its CPU is about
// KeyMessages times the CPU of one message plus Calls times the fixed cost
// of a call (design 6.10).
type NodeLoad struct {
	// KeyMessages counts the key messages the node ran (a script on one
	// key is one, a hybrid sync call one per key it carries).
	KeyMessages int64 `json:"key_messages"`
	// Calls counts the commands the node ran (one per sync call).
	Calls int64 `json:"calls"`
	// RedisCPUNS is the CPU time the node's server spent over the run
	// (INFO cpu, user and system), in nanoseconds: live mode only.
	RedisCPUNS *float64 `json:"redis_cpu_ns,omitempty"`
}

func newResult(r run, instances int, a accuracy, c *cmdCounter) Result {
	res := Result{
		Strategy:                  r.strategy,
		Instances:                 instances,
		Decisions:                 a.Decisions,
		Admitted:                  a.Admitted,
		OracleAdmitted:            a.OracleAdmitted,
		OvershootRatio:            round6(a.Overshoot),
		UndershootRatio:           round6(a.Undershoot),
		WorstWindowOvershootRatio: round6(a.WorstWindow),
		MostOverBound:             round6(a.MostOverBound),
		perKey:                    a.perKey,
	}
	if r.strategy.Synced() {
		ms := float64(r.interval) / float64(time.Millisecond)
		res.SyncIntervalMS = &ms
	}
	if c != nil {
		res.RedisCmds = c.Total()
		res.HottestSlotShare = round6(c.HottestSlotShare())
		res.PresenceCalls = c.Upkeep()
		res.KeyMessages = c.Work() - res.PresenceCalls
	}
	if a.Decisions > 0 {
		res.RedisCmdsPerDecision = round6(float64(res.RedisCmds) / float64(a.Decisions))
	}
	return res
}

// round6 rounds x to six decimals, to nearest, so that a report is
// deterministic to print and compare; but a nonzero x never rounds to 0
// (it becomes ±1e-6): a real overshoot below 5e-7, one extra admission in
// three million, must not read 0 beside admitted > oracle_admitted.
func round6(x float64) float64 {
	r := math.Round(x*1e6) / 1e6
	if r == 0 && x != 0 {
		return math.Copysign(1e-6, x)
	}
	return r
}

// Label names the result in tables and charts: "reserve 200ms", "exact".
func (r Result) Label() string {
	if r.SyncIntervalMS == nil {
		return string(r.Strategy)
	}
	return string(r.Strategy) + " " + r.interval().String()
}

func (r Result) interval() time.Duration {
	if r.SyncIntervalMS == nil {
		return 0
	}
	return time.Duration(*r.SyncIntervalMS * float64(time.Millisecond))
}

// WriteJSON writes the report as indented JSON. The same virtual run
// writes the same bytes.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

var csvHeader = []string{
	"strategy", "sync_interval_ms", "instances", "decisions", "admitted", "oracle_admitted",
	"overshoot_ratio", "undershoot_ratio", "worst_window_overshoot_ratio", "most_over_bound",
	"redis_cmds", "redis_cmds_per_decision", "hottest_slot_share", "fetch_cmds",
	"decisions_per_sec", "decision_p50_ns", "decision_p99_ns", "redis_cpu_ns_per_decision",
}

// WriteCSV writes one row per result under a header of the JSON field
// names; null fields are empty.
func (rep *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, r := range rep.Results {
		row := []string{
			string(r.Strategy), optFloat(r.SyncIntervalMS), strconv.Itoa(r.Instances),
			i64(r.Decisions), i64(r.Admitted), i64(r.OracleAdmitted),
			f64(r.OvershootRatio), f64(r.UndershootRatio), f64(r.WorstWindowOvershootRatio), f64(r.MostOverBound),
			i64(r.RedisCmds), f64(r.RedisCmdsPerDecision), f64(r.HottestSlotShare), i64(r.FetchCmds),
			optFloat(r.DecisionsPerSec), optInt(r.DecisionP50NS), optInt(r.DecisionP99NS), optFloat(r.RedisCPUPerDecisionNS),
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func i64(x int64) string   { return strconv.FormatInt(x, 10) }
func f64(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

func optFloat(x *float64) string {
	if x == nil {
		return ""
	}
	return f64(*x)
}

func optInt(x *int64) string {
	if x == nil {
		return ""
	}
	return i64(*x)
}

// WriteTable writes the report as aligned columns, ratios in percent.
func (rep *Report) WriteTable(w io.Writer) error {
	live := rep.Mode == "live"
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "strategy\tsync\tdecisions\tadmitted\toracle\tovershoot\tundershoot\tworst window\tredis cmds\tcmds/decision\thottest slot\t"
	if live {
		head += "decisions/s\tp50\tp99\tredis cpu/decision\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rep.Results {
		sync := "-"
		if r.SyncIntervalMS != nil {
			sync = r.interval().String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%.4f\t%s\t",
			r.Strategy, sync, r.Decisions, r.Admitted, r.OracleAdmitted,
			pct(r.OvershootRatio), pct(r.UndershootRatio), pct(r.WorstWindowOvershootRatio),
			r.RedisCmds, r.RedisCmdsPerDecision, pct(r.HottestSlotShare))
		if live {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t", optRate(r.DecisionsPerSec), optNS(r.DecisionP50NS), optNS(r.DecisionP99NS), optCPU(r.RedisCPUPerDecisionNS))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// pct prints a ratio in percent to two decimals; a positive ratio too
// small to show prints as <0.01%, not 0.00%, for the reason of round6.
func pct(x float64) string {
	s := strconv.FormatFloat(100*x, 'f', 2, 64)
	if x > 0 && s == "0.00" {
		return "<0.01%"
	}
	return s + "%"
}

func optRate(x *float64) string {
	if x == nil {
		return "-"
	}
	return strconv.FormatFloat(*x, 'f', 0, 64)
}

// optCPU prints nanoseconds of CPU as a duration.
func optCPU(x *float64) string {
	if x == nil {
		return "-"
	}
	return time.Duration(math.Round(*x)).String()
}

func optNS(x *int64) string {
	if x == nil {
		return "-"
	}
	return time.Duration(*x).String()
}
