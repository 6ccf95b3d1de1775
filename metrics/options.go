package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// An Option configures a collector. The interface is sealed: the options
// are the With functions of this package.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	namespace string
	labels    prometheus.Labels
}

// DefaultNamespace starts every metric name unless WithNamespace says otherwise.
const DefaultNamespace = "hybridlimit"

func build(opts []Option) (config, error) {
	c := config{namespace: DefaultNamespace}
	for _, o := range opts {
		if o == nil {
			return c, errors.New("metrics: nil option")
		}
		if err := o.apply(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithNamespace sets the first part of every metric name. Example:
// WithNamespace("api") names the rounds counter api_sync_rounds_total.
func WithNamespace(ns string) Option {
	return optionFunc(func(c *config) error {
		c.namespace = ns
		return nil
	})
}

// WithConstLabels adds labels with fixed values to every metric, to tell
// several collectors of one kind apart in one registry. A name a metric
// uses as a label of its own (rule, limiter, mode, outcome, class, path,
// result) is an error, and so are "le" and "quantile", which the
// exposition gives histogram buckets and summary quantiles. Example:
// WithConstLabels(prometheus.Labels{"service": "public-api"}).
func WithConstLabels(l prometheus.Labels) Option {
	return optionFunc(func(c *config) error {
		c.labels = make(prometheus.Labels, len(l))
		for k, v := range l {
			// A registry accepts these, and the scrape then has them
			// twice on a bucket line, which Prometheus rejects whole.
			if k == "le" || k == "quantile" {
				return fmt.Errorf("metrics: constant label %q is reserved for histogram buckets and summary quantiles", k)
			}
			c.labels[k] = v
		}
		return nil
	})
}

// checked returns the error a registry would find in c's descriptors (a
// constant label that clashes with a variable one), so the constructor
// reports it instead of MustRegister panicking later.
func checked(c prometheus.Collector) error {
	if err := prometheus.NewPedanticRegistry().Register(c); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
