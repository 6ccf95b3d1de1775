package rls

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports a Service's counters to Prometheus under the names of
// the reference's default statsd mapping (ratelimit_service_rate_limit_*,
// labelled domain and key), read at each scrape.
type collector struct {
	svc                                              *Service
	total, over, near, within, shadow, notFound      *prometheus.Desc
	loadOK, loadErr, callErr, globalShadow, requests *prometheus.Desc
	latency, refunded, refundErr, policy, dropped    *prometheus.Desc
}

// NewCollector returns a prometheus.Collector of s's counters; constLabels
// (EXTRA_TAGS) go on every metric. Register it on the registry of your
// choice.
func NewCollector(s *Service, constLabels prometheus.Labels) prometheus.Collector {
	rule := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("ratelimit_service_rate_limit_"+name, help, []string{"domain", "key"}, constLabels)
	}
	plain := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, constLabels)
	}
	return &collector{
		svc:          s,
		total:        rule("total_hits", "Hits of descriptors that matched a rule, weighted by hits_addend."),
		over:         rule("over_limit", "Hits over the limit."),
		near:         rule("near_limit", "Hits admitted past NEAR_LIMIT_RATIO of the limit."),
		within:       rule("within_limit", "Hits admitted."),
		shadow:       rule("shadow_mode", "Hits over the limit let through by shadow_mode."),
		notFound:     plain("ratelimit_service_rate_limit_domain_not_found", "Descriptors of requests to a domain no rules file defines.", "domain"),
		loadOK:       plain("ratelimit_service_config_load_success", "Rules loads that succeeded."),
		loadErr:      plain("ratelimit_service_config_load_error", "Rules loads that failed, the previous rules staying in use."),
		callErr:      plain("ratelimit_service_should_rate_limit_error", "Calls answered with an error, by cause.", "err_type"),
		globalShadow: plain("ratelimit_service_global_shadow_mode", "Responses SHADOW_MODE turned from OVER_LIMIT to OK."),
		requests:     plain("ratelimit_service_total_requests", "ShouldRateLimit calls.", "grpc_method"),
		latency:      plain("ratelimit_service_response_time_seconds", "Time to answer ShouldRateLimit.", "grpc_method"),
		refunded:     plain("hybridlimit_rls_refunded_hits", "Hits given back to descriptors of requests another descriptor denied."),
		refundErr:    plain("hybridlimit_rls_refund_errors", "Refunds that failed."),
		policy:       plain("hybridlimit_rls_failure_policy_decisions", "Descriptors decided by the failure policy because Redis could not be asked."),
		dropped:      plain("hybridlimit_rls_stat_keys_dropped", "Lookups of stat keys past HYBRIDLIMIT_MAX_STAT_KEYS, counted under key "+OverflowKey+"."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.total, c.over, c.near, c.within, c.shadow, c.notFound, c.loadOK, c.loadErr,
		c.callErr, c.globalShadow, c.requests, c.latency, c.refunded, c.refundErr, c.policy, c.dropped} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, r := range c.svc.RuleStats() {
		if r.Key == "" && r.Domain != "" {
			counter(c.notFound, r.DomainNotFound, r.Domain)
			continue
		}
		counter(c.total, r.TotalHits, r.Domain, r.Key)
		counter(c.over, r.OverLimit, r.Domain, r.Key)
		counter(c.near, r.NearLimit, r.Domain, r.Key)
		counter(c.within, r.WithinLimit, r.Domain, r.Key)
		counter(c.shadow, r.ShadowMode, r.Domain, r.Key)
	}
	s := c.svc.Stats()
	counter(c.loadOK, s.ConfigLoadSuccess)
	counter(c.loadErr, s.ConfigLoadError)
	counter(c.callErr, s.RedisError, "redis_error")
	counter(c.callErr, s.ServiceError, "service_error")
	counter(c.globalShadow, s.GlobalShadowMode)
	counter(c.requests, s.Requests, "ShouldRateLimit")
	buckets := make(map[float64]uint64, len(s.Latency.Bounds))
	for i, b := range s.Latency.Bounds {
		buckets[b.Seconds()] = s.Latency.Counts[i]
	}
	ch <- prometheus.MustNewConstHistogram(c.latency, s.Latency.Count, s.Latency.Sum.Seconds(), buckets, "ShouldRateLimit")
	counter(c.refunded, s.Refunded)
	counter(c.refundErr, s.RefundErrors)
	counter(c.policy, s.FailurePolicy)
	counter(c.dropped, s.StatKeysDropped)
}
