package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/rules"
)

// MiddlewareSource is what a middleware collector reads:
// *httplimit.Middleware, *grpclimit.Interceptor, or a test double. Both
// report their counters in one Stats type.
type MiddlewareSource interface {
	Stats() rules.Stats
}

var (
	_ MiddlewareSource = (*httplimit.Middleware)(nil)
	_ MiddlewareSource = (*grpclimit.Interceptor)(nil)
)

type middlewareCollector struct {
	src                          MiddlewareSource
	requests, decisions, errored *prometheus.Desc
	duration                     *prometheus.Desc
}

// NewMiddlewareCollector returns a collector of the HTTP middleware's
// counters, read from src.Stats() at each scrape. Its metrics, with the
// default namespace:
//
//	hybridlimit_http_requests_total{result}                          counter
//	hybridlimit_http_rule_decisions_total{rule,limiter,mode,outcome} counter
//	hybridlimit_http_limiter_errors_total{rule,limiter,class}        counter
//	hybridlimit_http_check_duration_seconds                          histogram
//
// result is admitted, limited (429, a fallback share's denial included),
// unavailable (503 from a FailClosed rule, or a limiter's FailClosed policy
// denying) or canceled. limiter is the rule's limiter kind (hybrid, global,
// local, custom), mode is enforce or shadow, outcome is an
// rules.Outcome (allowed, denied, shadow_denied, exempt, no_key,
// error_open, error_closed, skipped, refunded, unrefunded, misconfigured)
// and class a hybridlimit.ErrorClass (unavailable, closed, invalid,
// canceled, other). rule_decisions_total counts every request each rule saw
// once, admissions included, so
// rate(...{outcome="allowed"}) is the rule's admission rate and the sum
// over outcomes its request rate. check_duration_seconds times each
// request's check of its rules, refunds included, from 1us to 100ms
// buckets. Every series of every rule is sent, zeros included, so rates
// start from the first scrape; the rules are those of the source's list at
// the scrape, which a reload may change.
func NewMiddlewareCollector(src MiddlewareSource, opts ...Option) (prometheus.Collector, error) {
	return newRulesCollector(src, "http", "rate-limit middleware", opts)
}

// NewInterceptorCollector is NewMiddlewareCollector for the gRPC
// interceptors of package grpclimit: the same metrics, named
// hybridlimit_grpc_requests_total and so on, where limited is
// ResourceExhausted and unavailable is Unavailable.
func NewInterceptorCollector(src MiddlewareSource, opts ...Option) (prometheus.Collector, error) {
	return newRulesCollector(src, "grpc", "rate-limit interceptor", opts)
}

func newRulesCollector(src MiddlewareSource, subsystem, what string, opts []Option) (prometheus.Collector, error) {
	if src == nil {
		return nil, fmt.Errorf("metrics: nil %s", what)
	}
	c, err := build(opts)
	if err != nil {
		return nil, err
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(c.namespace, subsystem, name), help, labels, c.labels)
	}
	coll := &middlewareCollector{
		src:       src,
		requests:  d("requests_total", "Requests the "+what+" saw, by what it did with them.", "result"),
		decisions: d("rule_decisions_total", "Rate-limit rule outcomes per request, admissions included.", "rule", "limiter", "mode", "outcome"),
		errored:   d("limiter_errors_total", "Errors returned by a rule's limiter instead of a decision or a refund, by class.", "rule", "limiter", "class"),
		duration:  d("check_duration_seconds", "How long checking a request's rate-limit rules took, refunds included."),
	}
	return coll, checked(coll)
}

// Describe sends the descriptors of every metric.
func (c *middlewareCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.decisions
	ch <- c.errored
	ch <- c.duration
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
		for o := range rules.NumOutcomes {
			counter(c.decisions, r.Outcomes[o], r.Name, r.Limiter, mode, o.String())
		}
		for _, e := range hybridlimit.LimiterErrorClasses() {
			counter(c.errored, r.Errors[e], r.Name, r.Limiter, e.String())
		}
	}
	ch <- histogram(c.duration, s.CheckDuration)
}
