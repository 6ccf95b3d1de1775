package grpclimit

import (
	"errors"
	"log/slog"
)

// An Option configures an Interceptor. The interface is sealed: the
// options are the With functions of this package.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	logger    *slog.Logger
	headers   bool
	reportAll bool
	onLimited func(*Call, *Decision) error
	onError   func(*Call, *Decision) error
}

// WithLogger sends the interceptor's log lines to l, as
// httplimit.WithLogger does: a Warn for each limiter error and failed
// refund and the first call of each rule without a key, an Info for each
// call a shadow rule would have denied, a Debug for each limited call. The
// default discards them. Example: WithLogger(slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errors.New("grpclimit: nil logger")
		}
		c.logger = l
		return nil
	})
}

// WithHeaders says whether responses carry the "ratelimit-policy" and
// "ratelimit" header metadata (the default is true). Example:
// WithHeaders(false) for clients that read only the status.
func WithHeaders(on bool) Option {
	return optionFunc(func(c *config) error {
		c.headers = on
		return nil
	})
}

// WithAllPolicies reports every enforced rule that decided the call in the
// header metadata, tightest first, rather than the tightest alone.
func WithAllPolicies() Option {
	return optionFunc(func(c *config) error {
		c.reportAll = true
		return nil
	})
}

// WithOnLimited replaces the status of a call a rule denied: fn returns
// the error the client gets, and may log who is being throttled. Status(d)
// is the default one, to add details to. Example:
//
//	grpclimit.WithOnLimited(func(c *grpclimit.Call, d *grpclimit.Decision) error {
//		log.Printf("limited %s by %v", c.FullMethod, d.Violated)
//		return grpclimit.Status(d).Err()
//	})
func WithOnLimited(fn func(c *Call, d *Decision) error) Option {
	return optionFunc(func(c *config) error {
		if fn == nil {
			return errors.New("grpclimit: nil OnLimited")
		}
		c.onLimited = fn
		return nil
	})
}

// WithOnError replaces the status of a call whose limits could not be
// checked (codes.Unavailable by default), as WithOnLimited does.
func WithOnError(fn func(c *Call, d *Decision) error) Option {
	return optionFunc(func(c *config) error {
		if fn == nil {
			return errors.New("grpclimit: nil OnError")
		}
		c.onError = fn
		return nil
	})
}
