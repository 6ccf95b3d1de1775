package ruleset

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// Quota units a rule can announce in RateLimit-Policy's qu parameter.
const (
	UnitRequests           = "requests"
	UnitContentBytes       = "content-bytes"
	UnitConcurrentRequests = "concurrent-requests"
)

// MaxRuleNameLen bounds a rule's name, in bytes.
const MaxRuleNameLen = 64

// Spec is a front end's rule compiled for the engine: the fields of
// httplimit.Rule and grpclimit.Rule, with the request type R. Their docs
// say what each field means.
type Spec[R any] struct {
	Name      string
	Limiter   Limiter
	Limit     hybridlimit.Limit
	LimitFunc func(R) hybridlimit.Limit
	Key       func(R) (string, bool)
	Cost      int64
	CostFunc  func(R) int64
	Shadow    bool
	Match     func(R) bool
	Exempt    func(R) bool
	OnError   FailurePolicy
	FailRetry time.Duration
	QuotaUnit string
}

// ErrInvalidRule is wrapped by the errors for an invalid rule.
var ErrInvalidRule = errors.New("invalid rule")

// check validates the rule; its errors start with the field's name.
func (s *Spec[R]) check() error {
	if err := CheckName(s.Name); err != nil {
		return fmt.Errorf("Name: %w", err)
	}
	if err := usable(s.Limiter); err != nil {
		return fmt.Errorf("Limiter: %w", err)
	}
	switch {
	case s.Key == nil:
		return errors.New("Key: nil")
	case s.OnError != FailOpen && s.OnError != FailClosed:
		return fmt.Errorf("OnError: unknown failure policy %d", int(s.OnError))
	case s.FailRetry < 0:
		return fmt.Errorf("FailRetry: %v is negative", s.FailRetry)
	}
	if s.LimitFunc == nil || s.Limit != (hybridlimit.Limit{}) {
		if err := s.Limit.Validate(); err != nil {
			return fmt.Errorf("Limit: %w", err)
		}
	}
	if s.Cost < 0 {
		return fmt.Errorf("Cost: %w: %d", hybridlimit.ErrInvalidCost, s.Cost)
	}
	if s.Cost != 0 && s.LimitFunc == nil {
		if err := s.Limit.CheckCost(s.Cost); err != nil {
			return fmt.Errorf("Cost: %w", err)
		}
	}
	switch s.QuotaUnit {
	case "", UnitRequests, UnitContentBytes, UnitConcurrentRequests:
	default:
		return fmt.Errorf("QuotaUnit: %q is not %q, %q or %q", s.QuotaUnit, UnitRequests, UnitContentBytes, UnitConcurrentRequests)
	}
	return nil
}

// CheckName reports whether name can be a policy name: it goes into an
// sf-string, which holds printable ASCII only.
func CheckName(name string) error {
	if name == "" {
		return errors.New("empty")
	}
	if len(name) > MaxRuleNameLen {
		return fmt.Errorf("%d bytes, more than %d", len(name), MaxRuleNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("byte %#x at %d is not printable ASCII", c, i)
		}
	}
	return nil
}

// maxRawKey is the longest key a rule passes to its limiter as it is;
// longer ones are hashed, so a client cannot make keys that a limiter
// rejects as too long (and so pass under a FailOpen policy).
const maxRawKey = 256

// rule is a Spec with what the engine computes from it once.
type rule[R any] struct {
	Spec[R]
	raw, hashed   string // limiter key prefixes for raw and hashed keys
	quota, window int64  // of Limit; computed per request under LimitFunc
	shape         shape
	kind          string
	refunder      Refunder
	peeker        Peeker
	resetter      Resetter
	st            *ruleCounters
}

func compile[R any](s Spec[R]) rule[R] {
	if s.Cost == 0 {
		s.Cost = 1
	}
	r := rule[R]{Spec: s, kind: Kind(s.Limiter), shape: shapeOf(s.Limiter)}
	name := escapeKeyPart(s.Name)
	r.raw, r.hashed = name+"|", name+"#"
	r.quota, r.window = r.policyOf(s.Limit)
	r.refunder, _ = s.Limiter.(Refunder)
	r.peeker, _ = s.Limiter.(Peeker)
	r.resetter, _ = s.Limiter.(Resetter)
	return r
}

// escapeKeyPart escapes the separators of limiter keys in a rule name.
func escapeKeyPart(s string) string {
	if !strings.ContainsAny(s, `|#\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '|' || c == '#' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// limiterKey returns the key the rule passes to its limiter: the escaped
// rule name, '|' and the key, or '#' and the key's digest for a long key.
func (r *rule[R]) limiterKey(key string) string {
	if len(key) > maxRawKey {
		return r.hashed + Digest(key)
	}
	return r.raw + key
}

// Join combines key functions into one: the rule applies only when every
// part does. Parts are joined by '|', and '|' and '\' inside a part are
// escaped, so distinct combinations never make the same key.
func Join[R any](parts ...func(R) (string, bool)) func(R) (string, bool) {
	parts = append([]func(R) (string, bool)(nil), parts...)
	return func(req R) (string, bool) {
		var b strings.Builder
		for i, p := range parts {
			k, ok := p(req)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteByte('|')
			}
			if !strings.ContainsAny(k, `|\`) {
				b.WriteString(k)
				continue
			}
			for j := 0; j < len(k); j++ {
				if k[j] == '|' || k[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(k[j])
			}
		}
		return b.String(), b.Len() > 0
	}
}

// Digest returns 128 bits of SHA-256 of s, hex-encoded.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

func (r *rule[R]) failRetry() time.Duration {
	if r.FailRetry > 0 {
		return r.FailRetry
	}
	return time.Second
}

// policyOf returns the quota and window, in whole seconds, announced for
// the rule under l: a window algorithm admits Burst per Period; a token
// bucket admits Burst at once and refills it in Limit.Refill, which keeps
// both the burst and the long-run rate. A window that is not a whole number
// of seconds is rounded up, which understates the rate a client may use,
// never overstates it.
func (r *rule[R]) policyOf(l hybridlimit.Limit) (q, w int64) {
	d := l.Refill()
	if r.shape == shapeFixed || r.shape == shapeSliding {
		d = l.Period
	}
	return l.Burst, max(CeilSeconds(d), 1)
}

// shape is how a limiter's quota comes back, which says how long until it
// does (Policy.Next).
type shape int

const (
	shapeUnknown shape = iota // a custom limiter
	shapeTokens               // a token bucket: a token at a time
	shapeFixed                // a fixed window: all at its end
	shapeSliding              // a sliding window or log: as requests age out
)

func shapeOf(l Limiter) shape {
	switch l.(type) {
	case *hlsync.Limiter, *Local:
		return shapeTokens
	}
	if a, ok := l.(algorithmer); ok {
		switch a.Algorithm() {
		case global.TokenBucket, global.GCRA:
			return shapeTokens
		case global.FixedWindow:
			return shapeFixed
		case global.SlidingWindow, global.SlidingLog:
			return shapeSliding
		}
	}
	return shapeUnknown
}

// next returns Policy.Next for res, a decision of cost under limit.
func (r *rule[R]) next(res hybridlimit.Result, limit hybridlimit.Limit, cost int64) time.Duration {
	switch r.shape {
	case shapeTokens:
		if d := nextToken(res, limit); d > 0 {
			return d
		}
	case shapeFixed:
		if d := max(res.ResetAfter, res.RetryAfter); d > 0 {
			return d
		}
	}
	if !res.Allowed && cost == 1 && res.RetryAfter > 0 {
		return res.RetryAfter
	}
	return -1
}

// nextToken returns the time until a token bucket in the state res reports
// gains its next whole token: it holds Remaining + f tokens (0 <= f < 1) and
// is full after ResetAfter, (Burst - Remaining - f) intervals, so the next
// token comes Burst - Remaining - 1 intervals before that. A full bucket
// gains one an interval after it is spent. 0 when res does not say.
func nextToken(res hybridlimit.Result, l hybridlimit.Limit) time.Duration {
	if l.Rate < 1 || l.Period <= 0 || l.Burst < 1 {
		return 0
	}
	if res.Remaining >= l.Burst {
		return time.Duration((int64(l.Period) + l.Rate - 1) / l.Rate)
	}
	k := uint64(l.Burst - max(res.Remaining, 0) - 1)
	hi, lo := bits.Mul64(k, uint64(l.Period))
	if hi >= uint64(l.Rate) {
		return 0
	}
	q, _ := bits.Div64(hi, lo, uint64(l.Rate)) // k intervals, rounded down
	if q > math.MaxInt64 {
		return 0
	}
	return max(res.ResetAfter-time.Duration(q), 0)
}

// CeilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second) // not (d + time.Second - 1): it overflows near the largest d
	if d%time.Second != 0 {
		s++
	}
	return s
}
