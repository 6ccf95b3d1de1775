package global

import "github.com/hybridlimit/hybridlimit"

// Option configures a Limiter or a Concurrency limiter. The interface is
// sealed: the options are the ones this package defines.
type Option interface {
	apply(*config)
}

// config holds what the options set; defaults fills it first.
type config struct {
	prefix string
}

func defaults() config {
	return config{prefix: hybridlimit.DefaultPrefix}
}

// build applies opts over the defaults and makes the Keyspace.
func build(opts []Option) (hybridlimit.Keyspace, error) {
	c := defaults()
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return hybridlimit.NewKeyspace(c.prefix)
}

type prefixOption string

func (o prefixOption) apply(c *config) { c.prefix = string(o) }

// WithPrefix sets the prefix of every key the limiter writes; the default is
// hybridlimit.DefaultPrefix ("hl:"). It may not contain braces and is at
// most 64 bytes. With WithPrefix("api:rl:"), a GCRA limit on key "user:42"
// is stored at "api:rl:{user:42}:gcra2".
func WithPrefix(prefix string) Option { return prefixOption(prefix) }
