package httplimit

import (
	"errors"
	"log/slog"
	"net/http"
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
	onLimited func(http.ResponseWriter, *http.Request, *Decision)
	onError   func(http.ResponseWriter, *http.Request, *Decision)
}

func defaults() config {
	return config{logger: slog.New(slog.DiscardHandler)}
}

// WithLogger sends the middleware's log lines to l: an Error the first
// time each rule keyed by route finds no route to read (it limits nothing;
// see Middleware.Handler); a Warn for each limiter error and failed
// refund, and the first time each rule finds no key in a request; an Info
// for each request a shadow rule would have denied; a Debug for each
// request a rule limited (rule, key, request), which says who is being
// throttled. The default discards them. Example: WithLogger(slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errNilLogger
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

// WithAllPolicies reports every enforced rule that decided the request in
// the RateLimit-Policy and RateLimit fields, tightest first, rather than
// the tightest alone. Example: with per-ip 100/min (42 left) and per-key
// 1000/min (900 left), a response carries
// `RateLimit-Policy: "per-ip";q=100;w=60, "per-key";q=1000;w=60`.
func WithAllPolicies() Option {
	return optionFunc(func(c *config) error {
		c.reportAll = true
		return nil
	})
}

// WithOnLimited replaces the 429 response: fn is called for each request a
// rule denied, with the response's RateLimit fields, Retry-After and
// Cache-Control: no-store already set, and writes the status and body
// itself; it may also log or count who is being throttled (d.Violated,
// and the request). Example, a JSON body of the API's own:
//
//	httplimit.WithOnLimited(func(w http.ResponseWriter, r *http.Request, d *httplimit.Decision) {
//		w.Header().Set("Content-Type", "application/json")
//		w.WriteHeader(http.StatusTooManyRequests)
//		fmt.Fprintf(w, `{"error":"slow down","retry_in":%d}`+"\n", int(d.RetryAfter.Seconds()))
//	})
func WithOnLimited(fn func(w http.ResponseWriter, r *http.Request, d *Decision)) Option {
	return optionFunc(func(c *config) error {
		if fn == nil {
			return errors.New("httplimit: nil OnLimited")
		}
		c.onLimited = fn
		return nil
	})
}

// WithOnError replaces the 503 response of a request whose limits could
// not be checked (a FailClosed rule's limiter failed, or a limiter's
// FailClosed policy denied), as WithOnLimited does the 429: the fields,
// Retry-After and Cache-Control are set, fn writes the status and body.
func WithOnError(fn func(w http.ResponseWriter, r *http.Request, d *Decision)) Option {
	return optionFunc(func(c *config) error {
		if fn == nil {
			return errors.New("httplimit: nil OnError")
		}
		c.onError = fn
		return nil
	})
}
