package httplimit

import (
	"errors"
	"log/slog"
)

// An Option configures a Middleware. The interface is sealed: the options
// are the With functions of this package.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	logger    *slog.Logger
	legacy    bool
	reportAll bool
}

func defaults() config {
	return config{logger: slog.New(slog.DiscardHandler)}
}

// WithLogger sends the middleware's log lines to l: a Warn for each
// limiter error, an Info for each request a shadow rule would have denied.
// The default discards them. Example: WithLogger(slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errors.New("httplimit: nil logger")
		}
		c.logger = l
		return nil
	})
}

// WithLegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (delay-seconds) for the tightest rule, for clients
// that predate the RateLimit fields. Example: with a rule of 100 a minute
// and 42 left, resetting in 35 s, a response carries
// "X-RateLimit-Limit: 100", "X-RateLimit-Remaining: 42",
// "X-RateLimit-Reset: 35".
func WithLegacyHeaders() Option {
	return optionFunc(func(c *config) error {
		c.legacy = true
		return nil
	})
}

// WithAllPolicies reports every enforced rule that applied in the
// RateLimit-Policy and RateLimit fields, tightest first, rather than the
// tightest alone. Example: with per-ip 100/min (42 left) and per-key
// 1000/min (900 left), a response carries
// `RateLimit-Policy: "per-ip";q=100;w=60, "per-key";q=1000;w=60`.
func WithAllPolicies() Option {
	return optionFunc(func(c *config) error {
		c.reportAll = true
		return nil
	})
}
