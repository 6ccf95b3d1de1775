package rls

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/ruleset"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
	"github.com/hybridlimit/hybridlimit/lua"
)

// hitCounter is lua/hit_counter.lua: INCRBY and the key's TTL in one step.
var hitCounter = mustScript("hit_counter")

func mustScript(name string) *scripts.Script {
	src, err := lua.File(name + ".lua")
	if err != nil {
		panic("rls: " + err.Error()) // embedded at build time: a build mistake, caught by the tests
	}
	return scripts.NewScript(name, src)
}

// fixedBackend counts fixed windows as the reference service does, so its
// responses are the reference's, number for number: every hit of every
// descriptor counts, admitted or not, in a window aligned to the Unix
// epoch; a descriptor is over its limit when its window's count passes
// requests_per_unit. Keys are named as the reference names them, so the two
// share counts on one Redis.
type fixedBackend struct {
	main, perSecond redis.UniversalClient // perSecond: SECOND rules, when set
	prefix          string
	jitter          int64 // EXPIRATION_JITTER_MAX_SECONDS
	stopWhenOver    bool  // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
	nearRatio       float32
	policy          hybridlimit.FailurePolicy
	maxWait         time.Duration // bounds each request's Redis calls
	now             func() time.Time
	fallbacks       *atomic.Uint64
}

// window is one item's counter in this request.
type window struct {
	it      *item
	client  redis.UniversalClient
	key     string
	divider int64 // window length, seconds
	now     int64
	hits    uint64 // what this request adds, maybe 0 under stopWhenOver
	count   uint64 // the count after it
}

// prepare counts every item's window, pipelined, and fills its status:
// the reference counts all of a request's hits at once, whatever the
// verdict, so there is nothing to order and nothing spent to give back.
func (f *fixedBackend) prepare(ctx context.Context, items []*item, _ bool) ([]*item, error) {
	ctx, cancel := context.WithTimeout(ctx, f.maxWait)
	defer cancel()
	now := f.now().Unix()
	ws := make([]*window, len(items))
	for i, it := range items {
		if it.negative {
			return nil, fmt.Errorf("rls: descriptor %s: %w", it.m.statKey, errNegativeHits)
		}
		div := int64(it.rule.Period / time.Second)
		c := f.main
		if f.perSecond != nil && it.rule.Unit == rlspb.RateLimitResponse_RateLimit_SECOND {
			c = f.perSecond
		}
		ws[i] = &window{it: it, client: c, key: f.key(it, now/div*div), divider: div, now: now, hits: it.hits}
	}
	if f.stopWhenOver {
		if err := f.withoutOver(ctx, ws); err != nil {
			return items, f.failed(items, err)
		}
	}
	if err := f.count(ctx, ws); err != nil {
		return items, f.failed(items, err)
	}
	for _, w := range ws {
		f.answer(w)
	}
	return items, nil
}

// ask returns what prepare answered: nothing spent that a denial gives
// back, as the reference counts every hit.
func (f *fixedBackend) ask(context.Context, *item, bool) (ruleset.Spend, error) {
	return ruleset.Spend{}, nil
}

// withoutOver applies STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT as the
// reference does: it reads every count first, and when some descriptor
// would pass its limit, only those descriptors count this request's hits.
func (f *fixedBackend) withoutOver(ctx context.Context, ws []*window) error {
	counts, err := f.run(ctx, ws, func(w *window) []any { return []any{0, 1} })
	if err != nil {
		return err
	}
	over := make([]bool, len(ws))
	anyOver := false
	for i, w := range ws {
		over[i] = counts[i]+w.hits > uint64(w.it.rule.RequestsPerUnit)
		anyOver = anyOver || over[i]
	}
	if anyOver {
		for i, w := range ws {
			if !over[i] {
				w.hits = 0
			}
		}
	}
	return nil
}

// count adds each window's hits and reads the counts back.
func (f *fixedBackend) count(ctx context.Context, ws []*window) error {
	counts, err := f.run(ctx, ws, func(w *window) []any {
		ttl := w.divider
		if f.jitter > 0 {
			ttl += rand.Int64N(f.jitter)
		}
		return []any{w.hits, ttl}
	})
	if err != nil {
		return err
	}
	for i, w := range ws {
		w.count = counts[i]
	}
	return nil
}

// run runs hit_counter once per window, pipelined per client, and returns
// the counts. A script missing from the server's cache is sent again whole.
func (f *fixedBackend) run(ctx context.Context, ws []*window, args func(*window) []any) ([]uint64, error) {
	cmds := make([]*redis.Cmd, len(ws))
	argv := make([][]any, len(ws))
	pipes := map[redis.UniversalClient]redis.Pipeliner{}
	for i, w := range ws {
		p := pipes[w.client]
		if p == nil {
			p = w.client.Pipeline()
			pipes[w.client] = p
		}
		argv[i] = args(w)
		cmds[i] = hitCounter.EvalSha(ctx, p, []string{w.key}, argv[i]...)
	}
	for _, p := range pipes {
		_, _ = p.Exec(ctx) // each command's error is read below
	}
	counts := make([]uint64, len(ws))
	for i, cmd := range cmds {
		reply, err := cmd.Result()
		if scripts.IsNoScript(err) {
			reply, err = hitCounter.Run(ctx, ws[i].client, []string{ws[i].key}, argv[i]...)
		}
		if err != nil {
			return nil, err
		}
		n, err := scripts.DecodeInts(reply, 1)
		if err != nil {
			return nil, err
		}
		counts[i] = uint64(max(n[0], 0))
	}
	return counts, nil
}

// answer turns a window's count into the descriptor's status and stats.
func (f *fixedBackend) answer(w *window) {
	it, r := w.it, w.it.rule
	limit := uint64(r.RequestsPerUnit)
	reset := time.Duration(w.divider-w.now%w.divider) * time.Second
	near := nearThreshold(r.RequestsPerUnit, f.nearRatio)
	after := w.count
	before := after - min(after, it.hits)
	if after > limit {
		code := rlspb.RateLimitResponse_OVER_LIMIT
		if r.Shadow {
			code = rlspb.RateLimitResponse_OK
		}
		it.status = newStatus(r, code, 0, reset)
		it.stats.count(true, r.Shadow, before, after, it.hits, limit, near)
		return
	}
	it.status = newStatus(r, rlspb.RateLimitResponse_OK, uint32(limit-after), reset)
	it.stats.count(false, false, before, after, it.hits, limit, near)
}

// failed answers every item by the failure policy when Redis could not be
// asked, or reports the failure.
func (f *fixedBackend) failed(items []*item, err error) error {
	f.fallbacks.Add(uint64(len(items)))
	if f.policy == hybridlimit.FailError || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	now := f.now().Unix()
	for _, it := range items {
		div := int64(it.rule.Period / time.Second)
		reset := time.Duration(div-now%div) * time.Second
		if f.policy == hybridlimit.FailOpen {
			it.status = newStatus(it.rule, rlspb.RateLimitResponse_OK, 0, reset)
		} else {
			it.status = newStatus(it.rule, rlspb.RateLimitResponse_OVER_LIMIT, 0, reset)
		}
	}
	return nil
}

// key names a window's counter as the reference does: prefix, domain, '_',
// then key_value_ per entry (the pattern for a value shared by
// share_threshold), then the window's start in Unix seconds.
func (f *fixedBackend) key(it *item, start int64) string {
	var b strings.Builder
	b.WriteString(f.prefix)
	b.WriteString(it.domain)
	b.WriteByte('_')
	for i, e := range it.desc.GetEntries() {
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		if it.m.share != nil && it.m.share[i] != "" {
			b.WriteString(it.m.share[i])
		} else {
			b.WriteString(e.GetValue())
		}
		b.WriteByte('_')
	}
	b.WriteString(strconv.FormatInt(start, 10))
	return b.String()
}

func (f *fixedBackend) ping(ctx context.Context) error {
	err := f.main.Ping(ctx).Err()
	if f.perSecond != nil {
		err = errors.Join(err, f.perSecond.Ping(ctx).Err())
	}
	return err
}

func (f *fixedBackend) close(context.Context) error { return nil }
