package rls

import (
	"math"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/histogram"
)

// RuleStats counts the hits of one stat key, with the meanings of the
// reference service's per-rule stats. Hits are weighted by each
// descriptor's hits_addend.
type RuleStats struct {
	Domain string // the request's domain
	Key    string // the stat key after the domain: key_value.key...
	// TotalHits counts every hit of a descriptor that had a rule.
	TotalHits uint64
	// OverLimit counts hits over the limit; NearLimit hits admitted past
	// NEAR_LIMIT_RATIO of it (and, in fixed-window mode, those of a
	// request that crossed it); WithinLimit hits admitted; ShadowMode hits
	// over the limit that a shadow_mode rule let through.
	OverLimit, NearLimit, WithinLimit, ShadowMode uint64
	// DomainNotFound counts descriptors of requests to a domain no file
	// configures, under that domain's stat key "" (Key is empty).
	DomainNotFound uint64
}

// OverflowKey is the stat key that counts the hits of stat keys past the
// cap (WithMaxStatKeys): keys made from request values (detailed_metric,
// value_to_metric, limit overrides, unknown domains) could otherwise grow
// the metrics without bound.
const OverflowKey = "_overflow_"

type ruleCounters struct {
	domain, key                                       string
	total, over, near, within, shadow, domainNotFound atomic.Uint64
}

// statSet holds the counters of every stat key seen, up to max keys; the
// hits of later keys count under OverflowKey.
type statSet struct {
	m        sync.Map // string (domain + "\x00" + key) -> *ruleCounters
	mu       sync.Mutex
	n        int
	max      int
	overflow ruleCounters
	dropped  atomic.Uint64 // lookups that fell into the overflow
}

func newStatSet(max int) *statSet {
	s := &statSet{max: max}
	s.overflow.domain, s.overflow.key = OverflowKey, OverflowKey
	return s
}

// get returns the counters of a stat key, which starts with "domain.".
func (s *statSet) get(domain, statKey string) *ruleCounters {
	key := strings.TrimPrefix(statKey, domain+".")
	id := domain + "\x00" + key
	if c, ok := s.m.Load(id); ok {
		return c.(*ruleCounters)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.m.Load(id); ok {
		return c.(*ruleCounters)
	}
	if s.n >= s.max {
		s.dropped.Add(1)
		return &s.overflow
	}
	c := &ruleCounters{domain: domain, key: sanitizeStat(key)}
	s.m.Store(id, c)
	s.n++
	return c
}

// snapshot copies every counter, overflow last when it counted anything.
func (s *statSet) snapshot() []RuleStats {
	var out []RuleStats
	add := func(c *ruleCounters) {
		out = append(out, RuleStats{
			Domain: c.domain, Key: c.key, TotalHits: c.total.Load(), OverLimit: c.over.Load(),
			NearLimit: c.near.Load(), WithinLimit: c.within.Load(), ShadowMode: c.shadow.Load(),
			DomainNotFound: c.domainNotFound.Load(),
		})
	}
	s.m.Range(func(_, v any) bool {
		add(v.(*ruleCounters))
		return true
	})
	if s.dropped.Load() > 0 {
		add(&s.overflow)
	}
	return out
}

// ipv4 matches the dotted quads the reference rewrites in stat names.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitizeStat rewrites a stat key as the reference does for its stat
// names: ':' and '|' become '_', and the dots of an IPv4 address too.
func sanitizeStat(s string) string {
	s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// count records one descriptor's decision with the reference's formulas:
// before and after are the counts used before and after this request's
// hits, limit the requests_per_unit, near the near-limit threshold. A
// decision the limiter refused without spending counts as before = limit,
// so that all its hits are over.
func (c *ruleCounters) count(over, shadow bool, before, after, hits, limit, near uint64) {
	c.total.Add(hits)
	if !over {
		c.within.Add(hits)
		if after > near {
			if before >= near {
				c.near.Add(hits)
			} else {
				c.near.Add(after - near)
			}
		}
		return
	}
	if before >= limit {
		c.over.Add(hits)
	} else {
		c.over.Add(after - limit)
		c.near.Add(limit - max(near, before))
	}
	if shadow {
		if before >= limit {
			c.shadow.Add(hits)
		} else {
			c.shadow.Add(after - limit)
		}
	}
}

// nearThreshold is the count past which hits are near the limit:
// floor(limit x ratio), computed in float32 as the reference does.
func nearThreshold(limit uint32, ratio float32) uint64 {
	return uint64(math.Floor(float64(float32(limit) * ratio)))
}

// ServiceStats are the service's own counters.
type ServiceStats struct {
	ConfigLoadSuccess, ConfigLoadError uint64
	// RedisError counts calls that failed for want of Redis and were
	// answered with an error (failure policy "error");
	// ServiceError calls refused as malformed or unanswerable (no domain,
	// no descriptors, a bad override, no config loaded).
	RedisError, ServiceError uint64
	// GlobalShadowMode counts responses SHADOW_MODE turned from
	// OVER_LIMIT to OK.
	GlobalShadowMode uint64
	// Refunded counts hits given back to the descriptors of requests that
	// another descriptor denied; RefundErrors the refunds that failed.
	Refunded, RefundErrors uint64
	// FailurePolicy counts descriptors the failure policy decided.
	FailurePolicy uint64
	// StatKeysDropped counts hits counted under OverflowKey.
	StatKeysDropped uint64
	// CertReloads counts certificate files read again after they changed,
	// CertReloadErrors those that could not be (the old pair stays).
	CertReloads, CertReloadErrors uint64
	// Requests counts ShouldRateLimit calls, and Latency their duration,
	// in seconds.
	Requests uint64
	Latency  hybridlimit.Histogram
}

// latency are the buckets of ServiceStats.Latency, in seconds.
var latency = histogram.Spec{
	Bounds: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 1},
	Per:    1e9,
}

type serviceCounters struct {
	configLoadSuccess, configLoadError, redisError, serviceError  atomic.Uint64
	globalShadow, refunded, refundErrors, failurePolicy, requests atomic.Uint64
	latency                                                       histogram.Recorder
	certs                                                         certCounters
}

func (c *serviceCounters) observe(d time.Duration) {
	c.requests.Add(1)
	c.latency.Observe(&latency, int64(d))
}

func (c *serviceCounters) snapshot(dropped uint64) ServiceStats {
	h := c.latency.Snapshot(&latency)
	return ServiceStats{
		ConfigLoadSuccess: c.configLoadSuccess.Load(), ConfigLoadError: c.configLoadError.Load(),
		RedisError: c.redisError.Load(), ServiceError: c.serviceError.Load(),
		GlobalShadowMode: c.globalShadow.Load(), Refunded: c.refunded.Load(), RefundErrors: c.refundErrors.Load(),
		FailurePolicy: c.failurePolicy.Load(), StatKeysDropped: dropped, Requests: c.requests.Load(), Latency: h,
		CertReloads: c.certs.reloads.Load(), CertReloadErrors: c.certs.errors.Load(),
	}
}
