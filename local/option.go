package local

import "fmt"

// An Option configures a Table. Options are made by the With functions of
// this package; the interface is sealed.
type Option interface {
	apply(*options)
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// options holds a Table's settings. defaultOptions is the one place that
// fills the defaults.
type options struct {
	maxKeys int
	shards  int // 0: chosen from maxKeys
}

// DefaultMaxKeys is the number of keys a Table tracks at most unless
// WithMaxKeys says otherwise: about 100 MiB of entries at ~100 bytes a key.
const DefaultMaxKeys = 1 << 20

// maxShards bounds WithShards.
const maxShards = 1 << 16

func defaultOptions() options { return options{maxKeys: DefaultMaxKeys} }

// WithMaxKeys bounds the number of keys a Table tracks. When a key arrives
// and its shard is full, the Table drops one bucket among a small sample of
// that shard (eight entries): one that has been full for a minute if the
// sample holds one (forgetting it loses nothing), and otherwise the one
// short of the fewest tokens, forgiving that key the tokens it had not yet
// earned back. An idle bucket outside the sample is not looked for.
// The bound is enforced per shard, as floor(n/shards) keys each (with no
// more shards than n), so a Table may start evicting a little before it
// holds n keys in all, never after.
//
// For example, WithMaxKeys(100_000) caps a table of per-client limits at
// 100,000 clients, roughly 10 MB, however many distinct clients appear.
// It must be at least 1; the default is DefaultMaxKeys.
func WithMaxKeys(n int) Option { return optionFunc(func(o *options) { o.maxKeys = n }) }

// WithShards sets the number of independently locked shards of a Table, a
// power of two between 1 and 65536, or 0 for the default. More shards mean
// less lock contention and coarser eviction: each shard evicts on its own.
//
// For example, WithShards(16) suits a table of a few thousand keys that a
// handful of goroutines share. The default is 256 shards, fewer when
// WithMaxKeys leaves under 64 keys a shard; never more shards than
// WithMaxKeys allows keys.
func WithShards(n int) Option { return optionFunc(func(o *options) { o.shards = n }) }

// resolve applies opts over the defaults and checks the result.
func resolve(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	if o.maxKeys < 1 {
		return o, fmt.Errorf("local: max keys %d is less than 1", o.maxKeys)
	}
	if o.shards == 0 {
		o.shards = 256
		for o.shards > 1 && o.maxKeys/o.shards < 64 {
			o.shards /= 2
		}
	}
	if o.shards < 1 || o.shards > maxShards || o.shards&(o.shards-1) != 0 {
		return o, fmt.Errorf("local: %d shards is not a power of two in [1, %d]", o.shards, maxShards)
	}
	for o.shards > o.maxKeys { // every shard holds a key at least
		o.shards /= 2
	}
	return o, nil
}
