package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// HybridSource is what a hybrid collector reads: *sync.Limiter, or a test
// double.
type HybridSource interface {
	Stats() hlsync.Stats
}

var _ HybridSource = (*hlsync.Limiter)(nil)

type hybridCollector struct {
	src HybridSource

	keys, live, breakerOpen, lastRound                         *prometheus.Desc
	rounds, roundErrors, fetches, messages, scriptCalls, waits *prometheus.Desc
	elsewhere                                                  *prometheus.Desc
	decisions, breakerOpens, breakerCloses, owed, evicted      *prometheus.Desc
	nodeBreakerOpen, nodeBreakerOpenTime                       *prometheus.Desc
	admitted, charged, outstanding, staleness, breakerOpenTime *prometheus.Desc
	roundDuration, roundMessages, errors                       *prometheus.Desc
	splitKeys, reshards, moves                                 *prometheus.Desc
	debt, deniedDebt                                           *prometheus.Desc
}

// NewHybridCollector returns a collector of the hybrid limiter's counters,
// read from src.Stats() at each scrape. Its metrics, with the default
// namespace:
//
//	hybridlimit_sync_tracked_keys                     gauge
//	hybridlimit_sync_live_instances                   gauge
//	hybridlimit_sync_rounds_total                     counter
//	hybridlimit_sync_round_errors_total               counter
//	hybridlimit_sync_fetches_total                    counter
//	hybridlimit_sync_key_messages_total               counter
//	hybridlimit_sync_script_calls_total               counter
//	hybridlimit_sync_waits_total                      counter
//	hybridlimit_sync_decisions_total{outcome,path}    counter
//	hybridlimit_sync_breaker_open                     gauge (0 or 1)
//	hybridlimit_sync_breaker_opens_total              counter
//	hybridlimit_sync_breaker_closes_total             counter
//	hybridlimit_sync_node_breaker_open{node}          gauge (0 or 1)
//	hybridlimit_sync_node_breaker_open_seconds_total{node} counter
//	hybridlimit_sync_owed_cost                        gauge
//	hybridlimit_sync_evictions_total                  counter
//	hybridlimit_sync_last_round_duration_seconds      gauge
//	hybridlimit_sync_admitted_cost_total              counter
//	hybridlimit_sync_charged_cost_total               counter
//	hybridlimit_sync_debt_cost                        gauge
//	hybridlimit_sync_denied_debt_total                counter
//	hybridlimit_sync_outstanding_allowance            gauge
//	hybridlimit_sync_view_staleness_seconds           gauge
//	hybridlimit_sync_breaker_open_seconds_total       counter
//	hybridlimit_sync_round_duration_seconds           histogram
//	hybridlimit_sync_round_key_messages               histogram
//	hybridlimit_sync_errors_total{class}              counter
//	hybridlimit_sync_split_keys                       gauge
//	hybridlimit_sync_reshards_total                   counter
//	hybridlimit_sync_layout_moves_total               counter
//
// decisions_total counts only what the limiter counts: denials (path
// "global" when Redis said the bucket is empty, "local" when this instance
// ran out of allowance) and failure-policy decisions (path "fallback",
// "fail_open" or "fail_closed"). Admissions from local allowance are not
// counted one by one by the limiter, to keep its fast path free of shared
// writes; admitted_cost_total sums them (in cost units) from the keys at
// each scrape instead. The path is why the limiter decided so, which is
// finer than the Result.Source of the decision: the last three paths are
// all hybridlimit.SourceFallback, and a "global" denial is Redis's word
// heard during the call (SourceGlobal) or at an earlier round
// (SourceLocal).
//
// The two histograms observe every round that sent a key message: the
// loop's periodic rounds, the on-demand fetches and the final round of
// Close (see sync.Stats.RoundDuration); their buckets are the ones package
// sync fixes, read from the snapshot. errors_total counts failed calls to
// Redis, sync script calls and presence calls, by class: timeout,
// connection, error_reply, malformed_reply or other (hybridlimit.RedisErrorClasses).
// Every class is sent, zeros included.
func NewHybridCollector(src HybridSource, opts ...Option) (prometheus.Collector, error) {
	if src == nil {
		return nil, fmt.Errorf("metrics: nil hybrid limiter")
	}
	c, err := build(opts)
	if err != nil {
		return nil, err
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(c.namespace, "sync", name), help, labels, c.labels)
	}
	coll := &hybridCollector{
		src:                 src,
		keys:                d("tracked_keys", "Keys the hybrid limiter tracks in memory."),
		live:                d("live_instances", "Limiter instances alive in Redis, as last seen; sizes fallback shares."),
		breakerOpen:         d("breaker_open", "1 while the breaker of any Redis node keeps it off the request path and the failure policy decides for its keys, else 0."),
		lastRound:           d("last_round_duration_seconds", "Duration of the last background sync round."),
		rounds:              d("rounds_total", "Background sync rounds run."),
		roundErrors:         d("round_errors_total", "Background sync rounds in which at least one script call failed."),
		fetches:             d("fetches_total", "On-demand rounds run for decisions out of local allowance."),
		messages:            d("key_messages_total", "Per-key messages sent to Redis, over all rounds and fetches."),
		scriptCalls:         d("script_calls_total", "Batched sync script calls sent to Redis."),
		elsewhere:           d("key_messages_elsewhere_total", "Per-key messages a Redis node answered without applying, as it no longer serves their slot; each is sent again."),
		waits:               d("waits_total", "Decisions that waited for an on-demand fetch."),
		decisions:           d("decisions_total", "Decisions the limiter counts, by outcome and path: denials (global, local) and failure-policy decisions (fallback, fail_open, fail_closed). Admissions from local allowance are not counted.", "outcome", "path"),
		breakerOpens:        d("breaker_opens_total", "Times the breaker of a Redis node opened."),
		breakerCloses:       d("breaker_closes_total", "Times the breaker of a Redis node closed again."),
		nodeBreakerOpen:     d("node_breaker_open", "1 while this Redis node's breaker is open and the failure policy decides for the keys whose slots it serves, else 0.", "node"),
		nodeBreakerOpenTime: d("node_breaker_open_seconds_total", "Time this Redis node's breaker has been open.", "node"),
		owed:                d("owed_cost", "Cost the failure policy (FallbackLocal) admitted, or Charge charged beyond the allowance, that Redis has not yet taken from the keys' buckets: paid at each key's next sync."),
		evicted:             d("evictions_total", "Idle keys dropped from memory."),
		admitted:            d("admitted_cost_total", "Cost admitted from local allowance, all keys, charges included."),
		charged:             d("charged_cost_total", "Cost charged after the fact (Charge), all keys."),
		debt:                d("debt_cost", "How far the buckets of the keys this instance tracks are short of empty by Redis's last word and the refill since: charges beyond what they held, repaid by refill before they admit again. Instances sharing a key each count its debt."),
		deniedDebt:          d("denied_debt_total", "Denials (global or local) of keys whose bucket Redis last said is in debt."),
		outstanding:         d("outstanding_allowance", "Allowance held unspent now, all keys: tokens Redis counts as this instance's (Reserve) or that it may admit before reporting (Optimistic)."),
		staleness:           d("view_staleness_seconds", "How long Redis has left unanswered the sync rounds that needed it: 0 while it answers, and on an instance with nothing to sync."),
		breakerOpenTime:     d("breaker_open_seconds_total", "Time the breakers of the Redis nodes have been open, summed over the nodes: the failure policy deciding for some keys."),
		roundDuration:       d("round_duration_seconds", "Wall-clock time of sync rounds that sent key messages: periodic rounds, on-demand fetches and the final round."),
		roundMessages:       d("round_key_messages", "Key messages per sync round, over the same rounds as round_duration_seconds."),
		splitKeys:           d("split_keys", "Tracked keys split into parts over several slots (hot keys, WithSplitKeys or WithAutoSplit)."),
		reshards:            d("reshards_total", "Keys this instance split or merged back (WithAutoSplit)."),
		moves:               d("layout_moves_total", "Keys this instance moved to a new layout of parts, its own reshards and those it heard of from Redis."),
		errors:              d("errors_total", "Failed calls to Redis (sync script and presence calls), by class: timeout, connection, error_reply, malformed_reply, other.", "class"),
	}
	return coll, checked(coll)
}

// Describe sends the descriptors of every metric.
func (c *hybridCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.keys, c.live, c.breakerOpen, c.lastRound, c.rounds, c.roundErrors,
		c.fetches, c.messages, c.scriptCalls, c.elsewhere, c.waits, c.decisions, c.breakerOpens, c.breakerCloses, c.owed, c.evicted,
		c.nodeBreakerOpen, c.nodeBreakerOpenTime,
		c.admitted, c.charged, c.debt, c.deniedDebt, c.outstanding, c.staleness, c.breakerOpenTime, c.roundDuration, c.roundMessages, c.errors, c.splitKeys, c.reshards, c.moves} {
		ch <- d
	}
}

// Collect reads one Stats snapshot and sends every metric.
func (c *hybridCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(c.keys, float64(s.Keys))
	gauge(c.live, float64(s.LiveInstances))
	gauge(c.breakerOpen, b2f(s.BreakerOpen))
	gauge(c.lastRound, s.LastRound.Seconds())
	counter(c.rounds, s.Rounds)
	counter(c.roundErrors, s.RoundErrors)
	counter(c.fetches, s.Fetches)
	counter(c.messages, s.Messages)
	counter(c.scriptCalls, s.ScriptCalls)
	counter(c.elsewhere, s.Elsewhere)
	counter(c.waits, s.Waits)
	counter(c.decisions, s.DeniedRemote, "denied", "global")
	counter(c.decisions, s.DeniedLocal, "denied", "local")
	counter(c.decisions, s.FallbackAllowed, "allowed", "fallback")
	counter(c.decisions, s.FallbackDenied, "denied", "fallback")
	counter(c.decisions, s.FailOpen, "allowed", "fail_open")
	counter(c.decisions, s.FailClosed, "denied", "fail_closed")
	counter(c.breakerOpens, s.BreakerOpens)
	counter(c.breakerCloses, s.BreakerCloses)
	gauge(c.owed, float64(s.Owed))
	for _, n := range s.Nodes {
		gauge(c.nodeBreakerOpen, b2f(n.BreakerOpen), n.Addr)
		ch <- prometheus.MustNewConstMetric(c.nodeBreakerOpenTime, prometheus.CounterValue, n.OpenFor.Seconds(), n.Addr)
	}
	counter(c.evicted, s.Evictions)
	counter(c.admitted, s.Admitted)
	counter(c.charged, s.Charged)
	gauge(c.debt, float64(s.Debt))
	counter(c.deniedDebt, s.DeniedDebt)
	gauge(c.outstanding, float64(s.Outstanding))
	gauge(c.staleness, s.Unanswered.Seconds())
	ch <- prometheus.MustNewConstMetric(c.breakerOpenTime, prometheus.CounterValue, s.BreakerOpenFor.Seconds())
	ch <- histogram(c.roundDuration, s.RoundDuration)
	ch <- histogram(c.roundMessages, s.RoundMessages)
	gauge(c.splitKeys, float64(s.SplitKeys))
	counter(c.reshards, s.Reshards)
	counter(c.moves, s.Moves)
	for _, class := range hybridlimit.RedisErrorClasses() {
		counter(c.errors, s.Errors[class], class.String())
	}
}

// histogram turns a snapshot of a histogram into a constant Prometheus
// histogram, on the bounds the snapshot carries.
func histogram(d *prometheus.Desc, h hybridlimit.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i := range min(len(h.Bounds), len(h.Buckets)) {
		buckets[h.Bounds[i]] = h.Buckets[i]
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
