package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit/httplimit"
)

// MiddlewareSource is what a middleware collector reads:
// *httplimit.Middleware, or a test double.
type MiddlewareSource interface {
	Stats() httplimit.Stats
}

var _ MiddlewareSource = (*httplimit.Middleware)(nil)

type middlewareCollector struct {
	src                          MiddlewareSource
	requests, decisions, errored *prometheus.Desc
}

// NewMiddlewareCollector returns a collector of the middleware's counters,
// read from src.Stats() at each scrape. Its metrics, with the default
// namespace:
//
//	hybridlimit_http_requests_total{result}                        counter
//	hybridlimit_http_rule_decisions_total{rule,limiter,mode,outcome} counter
//	hybridlimit_http_limiter_errors_total{rule,limiter,class}      counter
//
// result is admitted, limited (429), unavailable (503 from a FailClosed
// rule, or a limiter's failure policy denying) or canceled. limiter is the rule's limiter kind (hybrid, global,
// local, custom), mode is enforce or shadow, outcome is an
// httplimit.Outcome (allowed, denied, shadow_denied, exempt, no_key,
// error_open, error_closed) and class an httplimit.ErrorClass. Every series
// of every rule is sent, zeros included, so rates start from the first scrape.
func NewMiddlewareCollector(src MiddlewareSource, opts ...Option) (prometheus.Collector, error) {
	if src == nil {
		return nil, fmt.Errorf("metrics: nil middleware")
	}
	c, err := build(opts)
	if err != nil {
		return nil, err
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(c.namespace, "http", name), help, labels, c.labels)
	}
	coll := &middlewareCollector{
		src:       src,
		requests:  d("requests_total", "Requests the rate-limit middleware saw, by what it did with them.", "result"),
		decisions: d("rule_decisions_total", "Rate-limit rule outcomes per request.", "rule", "limiter", "mode", "outcome"),
		errored:   d("limiter_errors_total", "Errors returned by a rule's limiter instead of a decision, by class.", "rule", "limiter", "class"),
	}
	return coll, checked(coll)
}

// Describe sends the descriptors of every metric.
func (c *middlewareCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.decisions
	ch <- c.errored
}

// Collect reads one Stats snapshot and sends every metric.
func (c *middlewareCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.requests, s.Admitted, "admitted")
	counter(c.requests, s.Limited, "limited")
	counter(c.requests, s.Unavailable, "unavailable")
	counter(c.requests, s.Canceled, "canceled")
	for _, r := range s.Rules {
		mode := "enforce"
		if r.Shadow {
			mode = "shadow"
		}
		for o := range httplimit.NumOutcomes {
			counter(c.decisions, r.Outcomes[o], r.Name, r.Limiter, mode, o.String())
		}
		for e := range httplimit.NumErrorClasses {
			counter(c.errored, r.Errors[e], r.Name, r.Limiter, e.String())
		}
	}
}
