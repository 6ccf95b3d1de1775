package rls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/ruleset"
)

// decider is what the default mode asks of the hybrid limiter (package
// sync): to decide, to peek, and to give back what a request that did not
// go ahead spent.
type decider interface {
	hybridlimit.Limiter
	hybridlimit.Peeker
	hybridlimit.Refunder
	hybridlimit.Charger
}

// hybridBackend serves every rule as a token bucket of requests_per_unit
// per unit, burst requests_per_unit, on the hybrid limiter. The limiter
// bounds each decision's wait for Redis by its max wait and, when Redis
// cannot be asked, decides by its failure policy (Result.Source says so):
// the policy error is the limiter's fail-closed, its denials answered
// UNAVAILABLE.
type hybridBackend struct {
	main, perSecond decider
	policy          hybridlimit.FailurePolicy
	charge          bool // hits over a descriptor's limit are charged anyway, costs or not (Settings.CountEveryHit)
	nearRatio       float32
	fallbacks       *atomic.Uint64 // descriptors the failure policy decided
	stores          []store
}

// store is one hybrid limiter the backend owns: closed and pinged with it.
type store struct {
	ping  func(context.Context) error
	close func(context.Context) error
}

func (h *hybridBackend) limiterFor(r *Rule) decider {
	if r.Unit == rlspb.RateLimitResponse_RateLimit_SECOND && h.perSecond != nil {
		return h.perSecond
	}
	return h.main
}

// prepare orders the items for ruleset.Decide, which spends nothing once
// a descriptor that decides the request (neither shadow nor quota) is over
// its limit (AfterPeek): the request is denied, so the others are only
// peeked at. Unless final, the descriptors that decide come first, the one
// with the least room first, so that a denied request rarely spends
// anywhere; what it did spend before the denial, the give-back returns.
func (h *hybridBackend) prepare(ctx context.Context, items []*item, final bool) ([]*item, error) {
	if !final && len(items) > 1 {
		return h.order(ctx, items), nil
	}
	return items, nil
}

// order returns items sorted for ruleset.Decide: the deciding descriptors
// first, by the share of their bucket this request would leave (least
// first), then quota descriptors, then shadow ones.
func (h *hybridBackend) order(ctx context.Context, items []*item) []*item {
	type ranked struct {
		it    *item
		class int
		room  float64
	}
	rs := make([]ranked, len(items))
	for i, it := range items {
		r := ranked{it: it}
		switch {
		case it.shadow():
			r.class = 2
		case it.quota:
			r.class = 1
		default:
			if lim, ok := it.rule.limit(); ok {
				if p, err := h.limiterFor(it.rule).Peek(ctx, h.key(it), lim); err == nil {
					r.room = float64(p.Remaining-int64(min(it.hits, 1<<53))) / float64(lim.Burst)
				}
			} else {
				r.room = -1
			}
		}
		rs[i] = r
	}
	sort.SliceStable(rs, func(a, b int) bool {
		if rs[a].class != rs[b].class {
			return rs[a].class < rs[b].class
		}
		return rs[a].room < rs[b].room
	})
	out := make([]*item, len(rs))
	for i, r := range rs {
		out[i] = r.it
	}
	return out
}

// ask answers one item, spending its hits only if spend is set, and
// returns what it spent.
func (h *hybridBackend) ask(ctx context.Context, it *item, spend bool) (ruleset.Spend, error) {
	r := it.rule
	rpu := uint64(r.RequestsPerUnit)
	near := nearThreshold(r.RequestsPerUnit, h.nearRatio)
	lim, ok := r.limit()
	switch {
	case !ok && it.hits == 0: // requests_per_unit 0: a check is all that passes
		it.status = newStatus(r, rlspb.RateLimitResponse_OK, 0, 0)
		return ruleset.Spend{}, nil
	case ok && it.negative:
		return ruleset.Spend{}, h.giveBack(ctx, h.limiterFor(r), it, lim)
	case !ok || it.hits > uint64(lim.Burst) && !(h.counts(it) && spend):
		// More than the bucket holds: never admitted, nothing to ask.
		h.deny(it, r.Period, rpu, near)
		return ruleset.Spend{}, nil
	}
	d := h.limiterFor(r)
	if it.hits > uint64(lim.Burst) {
		return ruleset.Spend{}, h.charged(ctx, d, it, lim, rpu, near)
	}
	if it.hits == 0 || !spend {
		p, err := d.Peek(ctx, h.key(it), lim)
		if err != nil {
			return ruleset.Spend{}, fmt.Errorf("rls: %w", err)
		}
		// A check (no hits) is over the limit only past it: the bucket in
		// debt, as the reference's counter past the limit, which hits
		// counted over it leave (a response cost, counting every hit).
		if it.hits == 0 && p.ResetAfter <= lim.Refill() || it.hits > 0 && uint64(p.Remaining) >= it.hits {
			it.status = newStatus(r, rlspb.RateLimitResponse_OK, clampRemaining(p.Remaining), p.ResetAfter)
			used := rpu - min(rpu, uint64(p.Remaining))
			it.stats.count(false, false, used, used, it.hits, rpu, near)
			return ruleset.Spend{}, nil
		}
		h.deny(it, max(p.RetryAfter, time.Second), rpu, near)
		return ruleset.Spend{}, nil
	}
	res, err := d.AllowN(ctx, h.key(it), lim, int64(it.hits))
	switch {
	case err != nil && ctx.Err() != nil:
		return ruleset.Spend{}, ctx.Err() // the caller gave up
	case err != nil:
		return ruleset.Spend{}, fmt.Errorf("rls: %w", err)
	case res.Source == hybridlimit.SourceFallback:
		h.fallbacks.Add(1)
		if h.policy == hybridlimit.FailError && !res.Allowed {
			return ruleset.Spend{}, fmt.Errorf("%w: %s", ErrUnavailable, r.FullKey)
		}
	}
	if !res.Allowed && h.counts(it) && res.Source != hybridlimit.SourceFallback {
		return ruleset.Spend{}, h.charged(ctx, d, it, lim, rpu, near)
	}
	if !res.Allowed {
		h.deny(it, res.RetryAfter, rpu, near)
		return ruleset.Spend{}, nil
	}
	it.status = newStatus(r, rlspb.RateLimitResponse_OK, clampRemaining(res.Remaining), res.ResetAfter)
	after := rpu - min(rpu, uint64(res.Remaining))
	it.stats.count(false, false, after-min(after, it.hits), after, it.hits, rpu, near)
	return ruleset.Spend{Limiter: d, Key: h.key(it), Limit: lim, Cost: int64(it.hits)}, nil
}

// counts reports whether the hits of it count when they are over its
// limit: a cost (the descriptor's own hits_addend, which Envoy sets from a rate
// limit action's hits_addend: Envoy Gateway's cost.request and
// cost.response, usage sent when a stream ends) is usage and counts
// whole; a request's plain hits are refused and count nowhere, since a
// bucket charged for every denied request stays in debt while its clients
// keep asking; with Settings.CountEveryHit every hit counts.
func (h *hybridBackend) counts(it *item) bool { return h.charge || it.cost }

// charged charges the hits of a descriptor over its limit (counts): the
// bucket goes into debt, and the descriptor is over its limit until
// refill repays it. What was charged is never given back.
func (h *hybridBackend) charged(ctx context.Context, d decider, it *item, lim hybridlimit.Limit, rpu, near uint64) error {
	res, err := d.Charge(ctx, h.key(it), lim, int64(it.hits))
	if err != nil {
		return fmt.Errorf("rls: charge: %w", err)
	}
	h.deny(it, max(res.RetryAfter, time.Second), rpu, near)
	return nil
}

// giveBack answers a descriptor with is_negative_hits: its hits go back
// into the bucket, as far as this replica's limiter admitted them for the
// key (Refund), and the status says what is left.
func (h *hybridBackend) giveBack(ctx context.Context, d decider, it *item, lim hybridlimit.Limit) error {
	if it.hits > 0 {
		if err := d.Refund(ctx, h.key(it), lim, int64(min(it.hits, uint64(lim.Burst)))); err != nil {
			return fmt.Errorf("rls: refund: %w", err)
		}
	}
	p, err := d.Peek(ctx, h.key(it), lim)
	if err != nil {
		return fmt.Errorf("rls: %w", err)
	}
	it.status = newStatus(it.rule, rlspb.RateLimitResponse_OK, clampRemaining(p.Remaining), p.ResetAfter)
	return nil
}

// deny answers an item OVER_LIMIT (OK under shadow_mode), with the time
// until it could be admitted as its duration_until_reset.
func (h *hybridBackend) deny(it *item, retry time.Duration, rpu, near uint64) {
	code := rlspb.RateLimitResponse_OVER_LIMIT
	if it.shadow() {
		code = rlspb.RateLimitResponse_OK
	}
	it.status = newStatus(it.rule, code, 0, retry)
	it.stats.count(true, it.shadow(), rpu, rpu+it.hits, it.hits, rpu, near)
}

func (h *hybridBackend) ping(ctx context.Context) error {
	var errs []error
	for _, s := range h.stores {
		errs = append(errs, s.ping(ctx))
	}
	return errors.Join(errs...)
}

func (h *hybridBackend) close(ctx context.Context) error {
	var errs []error
	for _, s := range h.stores {
		errs = append(errs, s.close(ctx))
	}
	return errors.Join(errs...)
}

// key names an item's bucket in the hybrid limiter: the domain and every
// entry as key=value, joined by '|', with '%', '|', '=' and '*' escaped in
// what the request sent; a value shared by share_threshold is its pattern,
// star unescaped, so it cannot meet a literal value. A limit override adds
// its limit, so that it never shares a bucket with a configured rule or an
// override of another size. A name longer than the limiter takes keeps its
// start and ends in a SHA-256 of the whole.
func (h *hybridBackend) key(it *item) string {
	if it.key != "" {
		return it.key
	}
	var b strings.Builder
	b.WriteString(escapeKey(it.domain, false))
	for i, e := range it.desc.GetEntries() {
		b.WriteByte('|')
		b.WriteString(escapeKey(e.GetKey(), false))
		b.WriteByte('=')
		if it.m.share != nil && it.m.share[i] != "" {
			b.WriteString(escapeKey(it.m.share[i], true))
		} else {
			b.WriteString(escapeKey(e.GetValue(), false))
		}
	}
	if it.rule.override {
		b.WriteString("|@")
		b.WriteString(strconv.FormatUint(uint64(it.rule.RequestsPerUnit), 10))
		b.WriteByte('/')
		b.WriteString(strconv.FormatInt(int64(it.rule.Period/time.Second), 10))
		b.WriteByte('s')
	}
	key := b.String()
	if len(key) > hybridlimit.MaxKeyLen {
		sum := sha256.Sum256([]byte(key))
		key = key[:hybridlimit.MaxKeyLen-1-2*len(sum)] + "#" + hex.EncodeToString(sum[:])
	}
	it.key = key
	return key
}

// escapeKey percent-encodes the bytes key uses as separators, and '*'
// unless keepStar.
func escapeKey(s string, keepStar bool) string {
	if !strings.ContainsAny(s, "%|=*") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '%', c == '|', c == '=', c == '*' && !keepStar:
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
