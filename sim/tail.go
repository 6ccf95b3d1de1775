package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// Tail is one key count of RunTail: the scenario's stream, at its rate,
// spread over Keys keys. The fewer decisions an instance makes of a key
// per sync interval, the more of them are the first it makes of the key
// in a while, each a fetch: where that is under about one, the hybrid
// costs Redis what the exact limiter does.
type Tail struct {
	Keys        int     `json:"keys"`
	Instances   int     `json:"instances"`
	Rate        float64 `json:"rate"`         // requests a second, all keys
	FirstSights int64   `json:"first_sights"` // as in Scaled
	Report      *Report `json:"report"`
}

// RunTail runs cfg in virtual time with the scenario's keys set to each
// of keys, and returns the reports in the order of keys. The runs go as
// RunScales's do.
func RunTail(ctx context.Context, cfg Config, keys []int) ([]Tail, error) {
	if len(keys) == 0 {
		return nil, errors.New("sim: no key count to run")
	}
	out := make([]Tail, len(keys))
	var jobs []sweepRun
	for i, k := range keys {
		sc := cfg.Scenario
		sc.Keys = k
		if err := sc.Validate(); err != nil {
			return nil, err
		}
		first, err := firstSights(sc)
		if err != nil {
			return nil, err
		}
		out[i] = Tail{Keys: k, Instances: sc.Instances, Rate: sc.Rate, FirstSights: first}
		c := cfg
		c.Scenario, c.Parallel, c.Progress = sc, 1, nil
		jobs = append(jobs, sweepRun{c, &out[i].Report})
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := runSweep(ctx, cfg.Progress, jobs); err != nil {
		return nil, err
	}
	return out, nil
}

// PerInterval returns how many decisions an instance makes of one key
// per sync interval of r, on average: the scenario's rate over its keys
// and instances. 0 for a strategy without an interval.
func (t Tail) PerInterval(r Result) float64 {
	if r.SyncIntervalMS == nil {
		return 0
	}
	return t.Rate / float64(t.Keys) / float64(t.Instances) * *r.SyncIntervalMS / 1000
}

// ParseKeyCounts parses a comma list of key counts, such as
// "20,2000,100000".
func ParseKeyCounts(s string) ([]int, error) {
	return parseList(s, "key count %q is not a positive integer", func(f string) (int, bool) {
		k, err := strconv.Atoi(f)
		return k, err == nil && k >= 1
	})
}

// WriteTailTable writes one row per strategy and sync interval at each
// key count: decisions per key per instance per interval, the accuracy,
// and what Redis ran per decision: key messages (what its CPU goes on),
// presence calls and commands, beside the first sights per decision.
func WriteTailTable(w io.Writer, tails []Tail) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "keys\tper key, instance, interval\tstrategy\tdecisions\tovershoot\tworst window\t"+
		"key msgs/decision\tpresence/decision\tcmds/decision\tfirst sights/decision\t")
	for _, t := range tails {
		if t.Report == nil {
			continue
		}
		for _, r := range t.Report.Results {
			per, first := "-", "-"
			if r.SyncIntervalMS != nil {
				per = strconv.FormatFloat(t.PerInterval(r), 'g', 3, 64)
			}
			if r.Strategy.Synced() && r.Decisions > 0 {
				first = strconv.FormatFloat(float64(t.FirstSights)/float64(r.Decisions), 'f', 4, 64)
			}
			msgs, presence := 0.0, 0.0
			if r.Decisions > 0 {
				msgs = float64(r.KeyMessages) / float64(r.Decisions)
				presence = float64(r.PresenceCalls) / float64(r.Decisions)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%.4f\t%.4f\t%.4f\t%s\t\n", t.Keys, per, r.Label(), r.Decisions,
				pct(r.OvershootRatio), pct(r.WorstWindowOvershootRatio), msgs, presence, r.RedisCmdsPerDecision, first)
		}
	}
	return tw.Flush()
}
