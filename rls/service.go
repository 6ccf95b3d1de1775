package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
)

// Errors ShouldRateLimit returns, as gRPC statuses: InvalidArgument for a
// request it cannot answer, Unavailable when no config is loaded or the
// store could not be asked under the failure policy "error".
var (
	ErrNoConfig    = errors.New("rls: no rate limit configuration loaded")
	ErrUnavailable = errors.New("rls: the rate limit store could not be asked")
)

// maxHits bounds a descriptor's hits_addend: counts stay exact in the
// doubles of Redis Lua.
const maxHits = 1 << 53

// errNegativeHits is returned for a descriptor with is_negative_hits that
// the mode cannot honour.
var errNegativeHits = errors.New("is_negative_hits needs the hybrid mode")

// item is one descriptor of a request on its way through a decision.
type item struct {
	domain    string
	desc      *rlpb.RateLimitDescriptor
	m         match
	rule      *Rule // nil: no rule applies (no match, replaced, unlimited)
	unlimited bool
	quota     bool // decides the request only with every other quota descriptor
	negative  bool // is_negative_hits: give hits back instead of taking them
	hits      uint64
	cost      bool   // hits set on the descriptor (its hits_addend): a cost, counted whole over the limit
	key       string // the backend's name for the counter, once made
	stats     *ruleCounters
	status    *rlspb.RateLimitResponse_DescriptorStatus
}

func (it *item) shadow() bool { return it.rule != nil && it.rule.Shadow }

// backend answers the items of one request that have a rule, as the
// applications of the one decision loop, ruleset.Decide.
type backend interface {
	// prepare readies the items for ask and returns them in the order to
	// ask them. final tells the backend that every descriptor is charged
	// whatever the outcome (SHADOW_MODE): it may not skip spending on any.
	prepare(ctx context.Context, items []*item, final bool) ([]*item, error)
	// ask fills the status of one prepared item, spending its hits only if
	// spend is set, and returns what it spent: what the give-back returns
	// when the request is denied (Cost 0: nothing, or nothing to return).
	ask(ctx context.Context, it *item, spend bool) (ruleset.Spend, error)
	// ping checks that every store answers.
	ping(ctx context.Context) error
	close(ctx context.Context) error
}

// Service answers Envoy's ShouldRateLimit from the loaded Config and a
// backend: the hybrid limiter (the default) or fixed windows counted as the
// reference service counts them. It holds no goroutine; see Server for the
// one that serves it. A Service is safe for concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer

	cfg     atomic.Pointer[Config]
	backend backend
	opt     serviceOptions
	rules   *statSet
	c       serviceCounters
	log     *slog.Logger
	tracer  *tracer // nil: no tracing
}

// serviceOptions are the settings a Service reads on every request.
type serviceOptions struct {
	globalShadow bool
	countAll     bool // Settings.CountEveryHit in hybrid mode: every descriptor spends, none given back
	globalQuota  bool
	headers      bool
	limitHeader  string
	remainHeader string
	resetHeader  string
	nearRatio    float32
}

// SetConfig makes c the config every later request reads, and counts a
// successful load.
func (s *Service) SetConfig(c *Config) {
	s.cfg.Store(c)
	s.c.configLoadSuccess.Add(1)
}

// ConfigError counts a load that failed; the config in use stays.
func (s *Service) ConfigError() { s.c.configLoadError.Add(1) }

// Config returns the config in use, nil before the first load.
func (s *Service) Config() *Config { return s.cfg.Load() }

// RuleStats returns the per-rule counters.
func (s *Service) RuleStats() []RuleStats { return s.rules.snapshot() }

// Stats returns the service counters.
func (s *Service) Stats() ServiceStats { return s.c.snapshot(s.rules.dropped.Load()) }

// ShouldRateLimit decides a request as Envoy's rate limit filter sends it.
// With tracing on, each call is a span, the child of the caller's.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	ctx, span := s.tracer.startSpan(ctx, req)
	resp, err := s.shouldRateLimit(ctx, req)
	endSpan(span, resp, err)
	return resp, err
}

func (s *Service) shouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	defer func() { s.c.observe(time.Since(start)) }()
	resp, err := s.decide(ctx, req)
	switch {
	case errors.Is(err, ErrUnavailable):
		s.c.redisError.Add(1)
		return nil, status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, ErrNoConfig):
		s.c.serviceError.Add(1)
		return nil, status.Error(codes.Unavailable, err.Error())
	case err != nil && ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil:
		s.c.serviceError.Add(1)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return resp, nil
}

func (s *Service) decide(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, errors.New("rls: the request has no domain")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, errors.New("rls: the request has no descriptors")
	}
	cfg := s.cfg.Load()
	if cfg == nil {
		return nil, ErrNoConfig
	}
	items, err := s.items(cfg, req)
	if err != nil {
		return nil, err
	}
	var limited, others []*item
	for _, it := range items {
		switch {
		case it.rule != nil:
			limited = append(limited, it)
		case !it.unlimited && s.opt.globalQuota:
			others = append(others, it) // a quota descriptor no rule limits
		}
	}
	if len(limited) > 0 {
		if limited, err = s.backend.prepare(ctx, limited, s.opt.globalShadow); err != nil {
			return nil, err
		}
	}
	apps := append(limited, others...)
	spends := make([]ruleset.Spend, len(apps))
	back := make([]int64, len(apps)) // what the give-back returned, per application
	var errs []error
	ask := func(i int, spend bool) (ruleset.Answer, error) {
		it := apps[i]
		if it.rule == nil {
			return ruleset.Answer{Quota: true}, nil
		}
		sp, err := s.backend.ask(ctx, it, spend)
		if err != nil {
			return ruleset.Answer{}, err
		}
		spends[i] = sp
		// The code already says shadow_mode's OK: a denial is what the
		// status says, as Envoy reads it.
		return ruleset.Answer{Spent: sp, Denied: it.status.Code == rlspb.RateLimitResponse_OVER_LIMIT, Quota: it.quota}, nil
	}
	opts := ruleset.DecideOptions{After: ruleset.AfterPeek, CountAll: s.opt.globalShadow || s.opt.countAll}
	rejected, err := ruleset.Decide(ctx, len(apps), opts, ask, func(i int, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		back[i] = spends[i].Cost
	})
	if err != nil {
		return nil, err
	}
	resp := s.respond(items, rejected)
	if rejected && s.opt.globalShadow {
		resp.OverallCode = rlspb.RateLimitResponse_OK
		s.c.globalShadow.Add(1)
	}
	// The statuses count what the give-back returned, the headers (made
	// above) what the descriptors held when decided.
	var given uint64
	for i, n := range back {
		if n > 0 {
			st := apps[i].status
			st.LimitRemaining = clampRemaining(min(int64(st.LimitRemaining)+n, spends[i].Limit.Burst))
			given += uint64(n)
		}
	}
	s.c.refunded.Add(given)
	if err := errors.Join(errs...); err != nil {
		s.c.refundErrors.Add(1)
		s.log.Warn("rls: refund failed", "err", err)
	}
	return resp, nil
}

// items matches every descriptor of req to its rule, and applies the
// replaces of the matched rules.
func (s *Service) items(cfg *Config, req *rlspb.RateLimitRequest) ([]*item, error) {
	items := make([]*item, len(req.GetDescriptors()))
	replaced := map[string]bool{}
	for i, d := range req.GetDescriptors() {
		it := &item{domain: req.GetDomain(), desc: d, hits: max(1, uint64(req.GetHitsAddend()))}
		if h := d.GetHitsAddend(); h != nil {
			it.hits, it.cost = h.GetValue(), true
		}
		it.negative = d.GetIsNegativeHits()
		if it.hits > maxHits {
			return nil, fmt.Errorf("rls: descriptor %d: hits_addend %d is more than %d", i, it.hits, uint64(maxHits))
		}
		m, known := cfg.lookup(req.GetDomain(), d)
		if !known {
			s.rules.get(req.GetDomain(), req.GetDomain()+".").domainNotFound.Add(1)
		}
		if m.rule != nil && m.rule.override {
			r, err := overrideRule(d.GetLimit(), m.statKey)
			if err != nil {
				return nil, fmt.Errorf("rls: descriptor %d: %w", i, err)
			}
			m.rule = r
		}
		it.m = m
		if r := m.rule; r != nil {
			for _, name := range r.Replaces {
				replaced[name] = true
			}
			if r.Unlimited {
				it.unlimited = true
			} else {
				it.rule = r
			}
		}
		items[i] = it
	}
	for _, it := range items {
		if it.rule != nil && it.rule.Name != "" && replaced[it.rule.Name] {
			it.rule = nil
		}
		if it.rule != nil {
			it.stats = s.rules.get(req.GetDomain(), it.m.statKey)
			it.quota = s.opt.globalQuota || it.rule.Quota
		}
	}
	return items, nil
}

// overrideRule makes the rule of a descriptor's limit override.
func overrideRule(o *rlpb.RateLimitDescriptor_RateLimitOverride, statKey string) (*Rule, error) {
	unit, err := overrideUnit(o.GetUnit())
	if err != nil {
		return nil, err
	}
	mult := o.GetUnitMultiplier().GetValue()
	p, err := periodOf(unit, mult)
	if err != nil {
		return nil, fmt.Errorf("limit override: %w", err)
	}
	return &Rule{FullKey: statKey, RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit, Period: p, Multiplier: mult, override: true}, nil
}

// respond builds the response from the decided items and the verdict: the
// overall code, a status per descriptor in request order, and the headers.
func (s *Service) respond(items []*item, rejected bool) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(items))}
	var header *rlspb.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, it := range items {
		st := it.status
		switch {
		case it.unlimited:
			st = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		case it.rule == nil:
			st = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		}
		resp.Statuses[i] = st
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			header, least = st, st.LimitRemaining
		}
		if st.Code == rlspb.RateLimitResponse_OVER_LIMIT && !it.unlimited && !it.quota {
			header, least = st, 0 // a descriptor that denies the request
		}
	}
	resp.OverallCode = rlspb.RateLimitResponse_OK
	if rejected {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if s.opt.headers && header != nil {
		resp.ResponseHeadersToAdd = []*corepb.HeaderValue{
			{Key: s.opt.limitHeader, Value: strconv.FormatUint(uint64(header.CurrentLimit.GetRequestsPerUnit()), 10)},
			{Key: s.opt.remainHeader, Value: strconv.FormatUint(uint64(header.LimitRemaining), 10)},
			{Key: s.opt.resetHeader, Value: strconv.FormatInt(header.DurationUntilReset.GetSeconds(), 10)},
		}
	}
	return resp
}

// newStatus is a descriptor status with its rule's limit.
func newStatus(r *Rule, code rlspb.RateLimitResponse_Code, remaining uint32, reset time.Duration) *rlspb.RateLimitResponse_DescriptorStatus {
	limit := &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
	if r.Multiplier > 1 {
		limit.UnitMultiplier = wrapperspb.UInt32(r.Multiplier)
	}
	return &rlspb.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       limit,
		LimitRemaining:     remaining,
		DurationUntilReset: durationpb.New(ceilSeconds(reset)),
	}
}

// ceilSeconds rounds d up to a whole second: Envoy reads the seconds of
// duration_until_reset, and a wait of 0.3 s read as 0 would send clients
// back too early.
func ceilSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}

// clampRemaining fits a count into limit_remaining.
func clampRemaining(n int64) uint32 {
	switch {
	case n <= 0:
		return 0
	case n >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}
