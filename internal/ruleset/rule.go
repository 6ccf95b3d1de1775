package ruleset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/bits"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/rules"
)

// maxRawKey is the longest key a rule passes to its limiter as it is;
// longer ones are hashed, so a client cannot make keys that a limiter
// rejects as too long (and so pass under a FailOpen policy).
const maxRawKey = 256

// rule is a rules.Rule with what the engine computes from it once.
type rule[R any] struct {
	rules.Rule[R]
	raw, hashed   string // limiter key prefixes for raw and hashed keys
	quota, window int64  // of Limit; computed per request under LimitFunc
	kind          string
	// traits are what the limiter says of itself: how its quota comes
	// back, and whether its Results are as of its last sync with Redis.
	traits   hybridlimit.Traits
	peeker   hybridlimit.Peeker
	resetter hybridlimit.Resetter
	st       *ruleCounters
}

// traitsOf returns what l says of itself; zero if it does not.
func traitsOf(l hybridlimit.Limiter) hybridlimit.Traits {
	if d, ok := l.(hybridlimit.Describer); ok {
		return d.Traits()
	}
	return hybridlimit.Traits{}
}

func compile[R any](s rules.Rule[R]) rule[R] {
	if s.Cost == 0 {
		s.Cost = 1
	}
	r := rule[R]{Rule: s, kind: rules.Kind(s.Limiter), traits: traitsOf(s.Limiter)}
	name := escapeKeyPart(s.Name)
	r.raw, r.hashed = name+"|", name+"#"
	r.quota, r.window = r.policyOf(s.Limit)
	r.peeker, _ = s.Limiter.(hybridlimit.Peeker)
	r.resetter, _ = s.Limiter.(hybridlimit.Resetter)
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
	if r.traits.Shape == hybridlimit.ShapeFixedWindow || r.traits.Shape == hybridlimit.ShapeSliding {
		d = l.Period
	}
	return l.Burst, max(CeilSeconds(d), 1)
}

// next returns Policy.Next for res, a decision of cost under limit, as far
// as res says: for a token bucket the time to its next token, for a fixed
// window the time to its end; on a denial never later than the wait it
// names, and for a cost of 1 that wait, which is exactly when more quota
// comes. -1 when res does not say: a sliding window's or log's admission,
// their denial of a larger cost, a custom limiter's; untilMore fills it in
// where it matters, when nothing is left.
func (r *rule[R]) next(res hybridlimit.Result, limit hybridlimit.Limit, cost int64) time.Duration {
	if !res.Allowed && res.Source == hybridlimit.SourceFallback {
		return res.RetryAfter // a fallback share's denial (fallbackDenial): its wait is all that is known
	}
	d := time.Duration(-1)
	switch r.traits.Shape {
	case hybridlimit.ShapeTokens:
		if t := nextToken(res, limit); t > 0 {
			d = t
		}
	case hybridlimit.ShapeFixedWindow:
		if t := max(res.ResetAfter, res.RetryAfter); t > 0 {
			d = t
		}
	}
	if !res.Allowed && res.RetryAfter > 0 && (cost == 1 || d > res.RetryAfter) {
		d = res.RetryAfter
	}
	return d
}

// untilMore fills in p.Next for a reported rule whose decision left
// nothing (RateLimit's r=0), where t is what a client needs most; key and
// limit are the decision's.
//
//   - p.Next says, from a limiter that decides exactly (a token bucket's
//     next token, a fixed window's end, a denial of cost 1): it stands.
//   - p.Next does not say (a sliding window's or log's admission, their
//     denial of a larger cost, a custom limiter's): the wait a peek of
//     cost 1 names, which is exact; for an exact limiter a Redis round
//     trip, made only here, for a reported rule left with nothing, so at
//     most one per admission at the limit and never for a denial of cost 1.
//   - the hybrid limiter's admission, whose Result is as of its last sync:
//     the sooner of p.Next and its Peek's wait (no Redis call), what it
//     would answer a request now, so that its next 429 names no earlier
//     time than t. Its denials name their own wait, which is current.
//   - a peek that finds quota (what aged out or was given back since the
//     decision, or another part of a split key): its Remaining is reported
//     instead, and r > 0 needs no t.
//   - no peek (a custom limiter without one, or the peek failed): a
//     denial's own wait, else the time until the limiter is full
//     (ResetAfter), else the policy's window, by which any limit of this
//     module has more quota whatever its state.
//
// On a denial p.Next ends never later than the denial's wait, so
// Retry-After is never earlier than t.
func (r *rule[R]) untilMore(ctx context.Context, key string, limit hybridlimit.Limit, p *rules.Policy) {
	res, next := p.Result, p.Next
	if res.Source == hybridlimit.SourceFallback {
		return // fallbackDenial's wait; the limiter's state is not the share's
	}
	if (next < 0 || r.traits.AsOfSync && res.Allowed) && r.peeker != nil {
		if pk, err := r.peeker.Peek(ctx, key, limit); err == nil {
			switch {
			case pk.Allowed && pk.Remaining > 0:
				p.Result.Remaining = min(pk.Remaining, limit.Burst)
				return
			case pk.Allowed:
				next = 0
			case pk.RetryAfter > 0 && (next < 0 || pk.RetryAfter < next):
				next = pk.RetryAfter
			}
		}
	}
	switch {
	case next >= 0:
	case !res.Allowed && res.RetryAfter > 0:
		next = res.RetryAfter
	case res.ResetAfter > 0:
		next = res.ResetAfter
	default:
		next = time.Duration(max(p.Window, 1)) * time.Second
	}
	if !res.Allowed && res.RetryAfter > 0 {
		next = min(next, res.RetryAfter)
	}
	p.Next = next
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
