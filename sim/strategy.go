package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// Strategy names a way of enforcing the limit across the instances.
type Strategy string

// The strategies, compared side by side on the same arrival stream.
const (
	// Exact asks Redis on every decision: one global/ token-bucket script
	// per request. It must match the oracle exactly.
	Exact Strategy = "exact"
	// Local lets each instance enforce its share, the limit divided by the
	// instance count, with no Redis at all. The shares of the burst sum to
	// exactly Burst (see localShare).
	Local Strategy = "local"
	// Optimistic is the hybrid limiter in Optimistic mode.
	Optimistic Strategy = "optimistic"
	// Reserve is the hybrid limiter in Reserve mode, its default.
	Reserve Strategy = "reserve"
	// ReserveSharded is Reserve with automatic sharding: keys the
	// instances find hot are split over several hash slots (see
	// shardedOptions).
	ReserveSharded Strategy = "reserve-sharded"
)

// Strategies lists the strategies that can run, in report order.
func Strategies() []Strategy { return []Strategy{Exact, Local, Optimistic, Reserve, ReserveSharded} }

// Synced reports whether the strategy depends on the sync interval. Those
// that do not (exact, local) run once per report, not once per interval.
func (s Strategy) Synced() bool { return s == Optimistic || s == Reserve || s == ReserveSharded }

// ParseStrategies parses a comma list such as "exact,reserve", or "all".
func ParseStrategies(list string) ([]Strategy, error) {
	if strings.TrimSpace(list) == "all" {
		return Strategies(), nil
	}
	var out []Strategy
	for _, f := range strings.Split(list, ",") {
		s := Strategy(strings.TrimSpace(f))
		switch {
		case !slices.Contains(Strategies(), s):
			return nil, fmt.Errorf("sim: unknown strategy %q (want a comma list of %s, or all)", s, joinStrategies())
		case slices.Contains(out, s):
			return nil, fmt.Errorf("sim: strategy %q listed twice", s)
		}
		out = append(out, s)
	}
	return out, nil
}

func joinStrategies() string {
	var names []string
	for _, s := range Strategies() {
		names = append(names, string(s))
	}
	return strings.Join(names, ",")
}

// ParseIntervals parses a comma list of sync intervals such as "50ms,1s".
func ParseIntervals(list string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(list, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("sim: sync interval %q: %w", f, err)
		}
		if d < time.Millisecond || d > time.Minute {
			return nil, fmt.Errorf("sim: sync interval %v is outside [1ms, 1m]", d)
		}
		if slices.Contains(out, d) {
			return nil, fmt.Errorf("sim: sync interval %v listed twice", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// DefaultIntervals are the sync intervals of the default run.
func DefaultIntervals() []time.Duration {
	return []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second}
}

// localShare is the limit instance i of n enforces in the Local strategy,
// and false if that instance admits nothing. The rate is spread by
// stretching the period, so that 100/s among 8 is exactly 100 per 8s each.
// The burst is split so that the shares sum to exactly Burst, B/n each and
// one more for the first B mod n instances: rounding every share up would
// let n instances hold up to n-1 tokens more than the limit at once (104 of
// 100 among 8), an overshoot the strategy's claim does not allow. An
// instance whose share of the burst is 0 (i >= B when B < n) admits
// nothing, since a bucket needs a burst of 1; its rate share is lost too,
// so below n the instances together refill B/n of the rate.
func localShare(l hybridlimit.Limit, n, i int) (hybridlimit.Limit, bool) {
	burst := l.Burst / int64(n)
	if int64(i) < l.Burst%int64(n) {
		burst++
	}
	return hybridlimit.Limit{Rate: l.Rate, Period: l.Period * time.Duration(n), Burst: burst}, burst > 0
}

// hybridOptions returns the options of a hybrid strategy's instance k,
// beyond the client, clock and interval the mode adds.
func hybridOptions(s Strategy, prefix string, k, instances int, interval, linger time.Duration) []hlsync.Option {
	opts := []hlsync.Option{
		hlsync.WithPrefix(prefix),
		hlsync.WithInstanceID(fmt.Sprintf("i%d", k)),
		hlsync.WithSyncInterval(interval, 0.1),
		hlsync.WithTuning(hlsync.Tuning{FetchLinger: linger}),
	}
	switch s {
	case Optimistic:
		opts = append(opts, hlsync.WithMode(hlsync.Optimistic))
	case Reserve:
		opts = append(opts, hlsync.WithMode(hlsync.Reserve))
	case ReserveSharded:
		opts = append(opts, hlsync.WithMode(hlsync.Reserve), hlsync.WithAutoSplit(shardedOptions(instances, interval)))
	}
	return opts
}

// shardedOptions is the automatic sharding of the reserve-sharded
// strategy: a key is hot when it costs Redis more than two messages per
// instance per interval, which a key only reaches when its instances keep
// fetching beyond their leases (demand near or over its limit); it is
// split into as many parts as the modelled cluster has masters, one part
// a master, and merged back after 5 seconds below a quarter of that. (A
// part count that is not a multiple of the masters leaves one master two
// parts: 4 parts on 3 masters load it with half the key, not a third.)
func shardedOptions(instances int, interval time.Duration) hlsync.AutoSplit {
	return hlsync.AutoSplit{
		Max:   ModelMasters,
		Above: 2 * float64(instances) / interval.Seconds(),
		Hold:  5 * time.Second,
	}
}

// run is one strategy at one sync interval (0 for those not synced).
type run struct {
	strategy  Strategy
	interval  time.Duration
	contender *Contender // live mode: the contender this run measures, named by strategy
}

// plan lists the runs of a report: strategies in the given order, each
// synced one at every interval, the others once.
func plan(strategies []Strategy, intervals []time.Duration) []run {
	var out []run
	for _, s := range strategies {
		if !s.Synced() {
			out = append(out, run{strategy: s})
			continue
		}
		for _, iv := range intervals {
			out = append(out, run{strategy: s, interval: iv})
		}
	}
	return out
}

// startOrder returns the indexes of runs in the order a pool of workers
// should start them, the costliest first, so that no long run starts last
// while the other workers sit idle. A run costs about its Redis commands:
// a synced strategy sends more the shorter its interval (Reserve also
// fetches every decision of a low limit), Exact one per decision but each
// cheaper to drive, Local none. The order changes nothing in a report.
func startOrder(runs []run) []int {
	rank := func(r run) int {
		switch r.strategy {
		case Reserve, ReserveSharded:
			return 0
		case Optimistic:
			return 1
		case Exact:
			return 2
		}
		return 3
	}
	order := make([]int, len(runs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ra, rb := runs[a], runs[b]
		if sa, sb := ra.strategy.Synced(), rb.strategy.Synced(); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(ra.interval, rb.interval); c != 0 {
			return c
		}
		return cmp.Compare(rank(ra), rank(rb))
	})
	return order
}
