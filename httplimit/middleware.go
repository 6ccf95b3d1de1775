package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Middleware enforces a list of rules on HTTP requests. For each request it
// runs Check (every rule, in order; see there for the tightest rule) and
//
//   - lets it through with the RateLimit-Policy and RateLimit fields of the
//     tightest rule set on the response (handlers may still change them);
//   - or answers 429 Too Many Requests with those fields, Retry-After in
//     delay-seconds (rounded up, at least 1; none when no wait admits the
//     request, its cost being above the rule's burst), Cache-Control:
//     no-store and an application/problem+json body of type
//     quota-exceeded naming the violated policies. A limit never yields
//     503;
//   - or, when a FailClosed rule's limiter failed, or a limiter's own
//     failure policy denied while Redis was out of reach, and no rule
//     denied, answers 503 with a temporary-reduced-capacity problem and
//     Retry-After.
//
// Shadow rules never change the response. A Middleware holds no goroutine
// and is safe for concurrent use; its limiters are started and closed by
// their owner.
type Middleware struct {
	rules []rule
	cfg   config
	stats stats
}

// rule is a Rule with what New computes from it once.
type rule struct {
	Rule
	raw, hashed   string // limiter key prefixes for raw and hashed keys
	quota, window int64
	kind          string
}

// maxRawKey is the longest key a rule passes to its limiter as it is;
// longer ones are hashed, so a client cannot make keys that a limiter
// rejects as too long (and so pass under a FailOpen policy).
const maxRawKey = 256

// New returns a Middleware enforcing rules, in the given order. It copies
// the rules and rejects invalid ones with an error naming the rule and
// field and wrapping ErrInvalidRule. An empty list is valid: every
// request passes.
func New(rules []Rule, opts ...Option) (*Middleware, error) {
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("httplimit: nil option")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	m := &Middleware{cfg: cfg, rules: make([]rule, len(rules))}
	seen := make(map[string]bool, len(rules))
	for i, r := range rules {
		if err := r.check(); err != nil {
			return nil, fmt.Errorf("%w: rules[%d] (%q): %w", ErrInvalidRule, i, r.Name, err)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("%w: rules[%d] (%q): Name: used by an earlier rule", ErrInvalidRule, i, r.Name)
		}
		seen[r.Name] = true
		if r.Cost == 0 {
			r.Cost = 1
		}
		cr := rule{Rule: r, kind: Kind(r.Limiter)}
		name := escapeKeyPart(r.Name)
		cr.raw, cr.hashed = name+"|", name+"#"
		cr.quota, cr.window = r.window()
		m.rules[i] = cr
	}
	m.stats.init(m.rules)
	return m, nil
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
func (r *rule) limiterKey(key string) string {
	if len(key) > maxRawKey {
		return r.hashed + digest(key)
	}
	return r.raw + key
}

func (r *rule) failRetry() time.Duration {
	if r.FailRetry > 0 {
		return r.FailRetry
	}
	return time.Second
}

// Handler returns next guarded by the rules. Its signature makes
// m.Handler a func(http.Handler) http.Handler, the shape routers take:
// router.Use(m.Handler).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := m.Check(r)
		if err != nil {
			// The client left, or the request's deadline passed, while
			// a limiter decided: serving it would be wasted work.
			m.stats.requests[requestCanceled].Add(1)
			writeProblem(w, http.StatusServiceUnavailable, 0, reducedCapacity, "The request ended before its rate limits could be checked.", nil)
			return
		}
		h := w.Header()
		writeFields(h, &d, m.cfg.legacy)
		switch d.Status {
		case http.StatusOK:
			m.stats.requests[requestAdmitted].Add(1)
			next.ServeHTTP(w, r)
		case http.StatusTooManyRequests:
			m.stats.requests[requestLimited].Add(1)
			detail := fmt.Sprintf("Quota exceeded for %s.", quoteList(d.Violated))
			writeProblem(w, d.Status, d.RetryAfter, quotaExceeded, detail, d.Violated)
		default:
			m.stats.requests[requestUnavailable].Add(1)
			writeProblem(w, d.Status, d.RetryAfter, reducedCapacity, "Rate limits could not be checked; try again later.", nil)
		}
	})
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) == 1 {
		return "policy " + q[0]
	}
	return "policies " + strings.Join(q, ", ")
}
