package rls

import (
	"sort"
	"strings"

	"github.com/hybridlimit/hybridlimit"
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports a Service's counters to Prometheus, read at each scrape:
// the reference's stats under the names and labels a MetricMapping gives
// their dotted names, and the service's own under fixed names
// (hybridlimit_rls_*). The mapped names depend on the mapping and on the
// stats seen, so it describes nothing ahead and a registry takes it
// unchecked.
type collector struct {
	svc                                 *Service
	mapping                             *MetricMapping
	constLabels                         prometheus.Labels
	refunded, refundErr, policy         *prometheus.Desc
	dropped, certReloads, droppedSeries *prometheus.Desc
}

// statHelp is the help of each stat, by the last part of its name.
var statHelp = map[string]string{
	"total_hits":          "Hits of descriptors that matched a rule, weighted by hits_addend.",
	"over_limit":          "Hits over the limit.",
	"near_limit":          "Hits admitted past NEAR_LIMIT_RATIO of the limit.",
	"within_limit":        "Hits admitted.",
	"shadow_mode":         "Hits over the limit let through by shadow_mode.",
	"domain_not_found":    "Descriptors of requests to a domain no rules define.",
	"config_load_success": "Rules loads that succeeded.",
	"config_load_error":   "Rules loads that failed, the previous rules staying in use.",
	"redis_error":         "Calls answered with an error because Redis could not be asked.",
	"service_error":       "Calls answered with an error because they could not be answered.",
	"global_shadow_mode":  "Responses SHADOW_MODE turned from OVER_LIMIT to OK.",
	"total_requests":      "ShouldRateLimit calls.",
	"response_time":       "Time to answer ShouldRateLimit.",
}

// NewCollector returns a prometheus.Collector of s's counters, the
// reference's stats named by mapping (nil: DefaultMetricMapping(false));
// constLabels (EXTRA_TAGS) go on every metric. Register it on the registry
// of your choice.
func NewCollector(s *Service, constLabels prometheus.Labels, mapping *MetricMapping) (prometheus.Collector, error) {
	if mapping == nil {
		m, err := DefaultMetricMapping(false)
		if err != nil {
			return nil, err
		}
		mapping = m
	}
	plain := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, constLabels)
	}
	return &collector{
		svc: s, mapping: mapping, constLabels: constLabels,
		refunded:      plain("hybridlimit_rls_refunded_hits", "Hits given back to descriptors of requests another descriptor denied."),
		refundErr:     plain("hybridlimit_rls_refund_errors", "Refunds that failed."),
		policy:        plain("hybridlimit_rls_failure_policy_decisions", "Descriptors decided by the failure policy because Redis could not be asked."),
		dropped:       plain("hybridlimit_rls_stat_keys_dropped", "Lookups of stat keys past HYBRIDLIMIT_MAX_STAT_KEYS, counted under key "+OverflowKey+"."),
		certReloads:   plain("hybridlimit_rls_certificate_reloads", "Certificate files read again after they changed, by result (error: the pair in use stays).", "result"),
		droppedSeries: plain("hybridlimit_rls_metric_series_dropped", "Stats left out of this scrape because the metric mapping gives them a series that clashes with another's (other label names, another type, a name or label Prometheus refuses)."),
	}, nil
}

// Describe sends nothing: the collector is unchecked.
func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	fams := families{mapping: c.mapping}
	for _, r := range c.svc.RuleStats() {
		base := "ratelimit.service.rate_limit." + r.Domain + "."
		if r.Key == "" {
			fams.add(base+"domain_not_found", kindCounter, float64(r.DomainNotFound), nil)
			continue
		}
		base += r.Key + "."
		fams.add(base+"total_hits", kindCounter, float64(r.TotalHits), nil)
		fams.add(base+"over_limit", kindCounter, float64(r.OverLimit), nil)
		fams.add(base+"near_limit", kindCounter, float64(r.NearLimit), nil)
		fams.add(base+"within_limit", kindCounter, float64(r.WithinLimit), nil)
		fams.add(base+"shadow_mode", kindCounter, float64(r.ShadowMode), nil)
	}
	s := c.svc.Stats()
	fams.add("ratelimit.service.config_load_success", kindCounter, float64(s.ConfigLoadSuccess), nil)
	fams.add("ratelimit.service.config_load_error", kindCounter, float64(s.ConfigLoadError), nil)
	fams.add("ratelimit.service.call.should_rate_limit.redis_error", kindCounter, float64(s.RedisError), nil)
	fams.add("ratelimit.service.call.should_rate_limit.service_error", kindCounter, float64(s.ServiceError), nil)
	fams.add("ratelimit.service.global_shadow_mode", kindCounter, float64(s.GlobalShadowMode), nil)
	fams.add("ratelimit_server.ShouldRateLimit.total_requests", kindCounter, float64(s.Requests), nil)
	// statsd timers are in milliseconds; the mapping's scale makes them
	// seconds (the default mapping's 0.001) or leaves them.
	fams.add("ratelimit_server.ShouldRateLimit.response_time", kindTimer, 0, &s.Latency)
	dropped := fams.emit(ch, c.constLabels)

	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.refunded, s.Refunded)
	counter(c.refundErr, s.RefundErrors)
	counter(c.policy, s.FailurePolicy)
	counter(c.dropped, s.StatKeysDropped)
	counter(c.certReloads, s.CertReloads, "ok")
	counter(c.certReloads, s.CertReloadErrors, "error")
	ch <- prometheus.MustNewConstMetric(c.droppedSeries, prometheus.GaugeValue, float64(dropped))
}

// families gathers the mapped stats of one scrape by metric name: stats
// that map to one series are added up, as statsd_exporter adds up the
// events of one series.
type families struct {
	mapping *MetricMapping
	byName  map[string]*family
	order   []string
	dropped int
}

type family struct {
	kind   metricKind
	help   string
	labels []string // sorted
	series map[string]*series
	order  []string
}

type series struct {
	values []string
	v      float64
	h      *hybridlimit.Histogram
	scale  float64
}

func (f *families) add(stat string, kind metricKind, v float64, h *hybridlimit.Histogram) {
	name, labels, scale, ok := f.mapping.name(stat, kind)
	if !ok {
		return
	}
	names := make([]string, 0, len(labels))
	for l := range labels {
		names = append(names, l)
	}
	sort.Strings(names)
	if f.byName == nil {
		f.byName = map[string]*family{}
	}
	fam := f.byName[name]
	if fam == nil {
		help := statHelp[stat[strings.LastIndexByte(stat, '.')+1:]]
		fam = &family{kind: kind, help: help, labels: names, series: map[string]*series{}}
		f.byName[name] = fam
		f.order = append(f.order, name)
	}
	if fam.kind != kind || strings.Join(fam.labels, "\x00") != strings.Join(names, "\x00") {
		f.dropped++
		return
	}
	values := make([]string, len(names))
	for i, l := range names {
		values[i] = labels[l]
	}
	id := strings.Join(values, "\x00")
	se := fam.series[id]
	switch {
	case se == nil:
		fam.series[id] = &series{values: values, v: v, h: h, scale: scale}
		fam.order = append(fam.order, id)
	case kind == kindCounter:
		se.v += v
	default:
		f.dropped++ // two timers in one series: one histogram cannot hold both
	}
}

// emit sends every series and returns how many stats were dropped.
func (f *families) emit(ch chan<- prometheus.Metric, constLabels prometheus.Labels) int {
	for _, name := range f.order {
		fam := f.byName[name]
		desc := prometheus.NewDesc(name, fam.help, fam.labels, constLabels)
		for _, id := range fam.order {
			se := fam.series[id]
			var m prometheus.Metric
			var err error
			if fam.kind == kindCounter {
				m, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, se.v, se.values...)
			} else {
				m, err = timerMetric(desc, se)
			}
			if err != nil {
				f.dropped++
				continue
			}
			ch <- m
		}
	}
	return f.dropped
}

// timerMetric is the histogram of a timer series, in statsd's milliseconds
// times the mapping's scale.
func timerMetric(desc *prometheus.Desc, se *series) (prometheus.Metric, error) {
	h := se.h
	factor := 1000 * se.scale
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b*factor] = h.Buckets[i]
	}
	return prometheus.NewConstHistogram(desc, h.Count, h.Sum*factor, buckets, se.values...)
}
