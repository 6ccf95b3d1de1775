package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
	"github.com/hybridlimit/hybridlimit/internal/usage"
)

// Middleware enforces a list of rules on HTTP requests. For each request it
// runs Check (the rules in order, until one rejects the request; see there
// for what a rejected request spends) and
//
//   - lets it through with the RateLimit-Policy and RateLimit fields of the
//     tightest rule set on the response (handlers may still change them);
//   - or answers 429 Too Many Requests with those fields, Retry-After in
//     delay-seconds (rounded up, at least 1; none when no wait admits the
//     request, its cost being above the rule's burst), Cache-Control:
//     no-store and an application/problem+json body of type
//     quota-exceeded naming the violated policy (WithOnLimited replaces
//     the status and body). A limit never yields 503, nor does the
//     hybrid limiter's fallback share, a coarse limit of its own while
//     Redis is out of reach: its denial is a 429 with Retry-After,
//     reporting r=0 and the share's wait as t;
//   - or, when a FailClosed rule's limiter failed, or a limiter's own
//     FailClosed policy denied while Redis was out of reach
//     (Result.FailedClosed), answers 503 with a temporary-reduced-capacity
//     problem and Retry-After (WithOnError replaces it).
//
// Shadow rules never change the response. Reload swaps the rules without
// losing the limiters' state; Reset forgets a key of a rule.
//
// A Middleware holds no goroutine and is safe for concurrent use; its
// limiters are started and closed by their owner.
type Middleware struct {
	eng *ruleset.Engine[*http.Request]
	cfg config
	// legacy and reportAll start as the options say; Config.Reload may
	// change them.
	flags atomic.Pointer[headerFlags]
}

type headerFlags struct{ legacy, reportAll bool }

// New returns a Middleware enforcing rules, in the given order. It copies
// the rules and rejects invalid ones with an error naming the rule and
// field and wrapping rules.ErrInvalidRule. An empty list is valid: every
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
	eng, err := ruleset.New(rules, cfg.logger.With("component", "httplimit"), describe)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	m := &Middleware{eng: eng, cfg: cfg}
	m.flags.Store(&headerFlags{legacy: cfg.legacy, reportAll: cfg.reportAll})
	return m, nil
}

// describe renders a request for log lines.
func describe(r *http.Request) string { return r.Method + " " + r.URL.Path }

// SetFields chooses the optional response fields for the requests checked
// from now on, as WithLegacyHeaders (legacy: the X-RateLimit-* fields) and
// WithAllPolicies (every rule, not only the tightest) do at New. A config's
// Reload sets them (package httplimit/config).
func (m *Middleware) SetFields(legacy, allPolicies bool) {
	m.flags.Store(&headerFlags{legacy: legacy, reportAll: allPolicies})
}

// Reload replaces the rules, atomically: each request is checked against
// the old list or the new one, never a mix. Invalid rules are an error and
// leave the old list in place. The limiters keep their state, which is
// keyed by rule name: a rule that keeps its name keeps its keys' quotas
// (under a new limit, as each limiter's limit change says) and its
// counters. Options stay as New set them.
func (m *Middleware) Reload(rules []Rule) error {
	if err := m.eng.Reload(rules); err != nil {
		return fmt.Errorf("httplimit: %w", err)
	}
	return nil
}

// Reset forgets key under the named rule, in the rule's limiter: the next
// request of that key finds the full quota (every instance at once for
// exact limiters; for the hybrid limiter, see its Reset). key is the
// identity the rule's KeyFunc returns, such as the client address
// "203.0.113.7"; for a key the request gives, such as an API key that
// APIKey hashes, use ResetRequest.
func (m *Middleware) Reset(ctx context.Context, rule, key string) error {
	if err := m.eng.Reset(ctx, rule, key); err != nil {
		return fmt.Errorf("httplimit: reset: %w", err)
	}
	return nil
}

// ResetRequest forgets the key the named rule finds in r, as Reset does:
// an operator resets an API key's quota by building a request carrying it.
func (m *Middleware) ResetRequest(ctx context.Context, rule string, r *http.Request) error {
	key, ok, err := m.eng.KeyOf(rule, r)
	switch {
	case err != nil:
		return fmt.Errorf("httplimit: reset: %w", err)
	case !ok:
		return fmt.Errorf("httplimit: reset: rule %q finds no key in the request", rule)
	}
	return m.Reset(ctx, rule, key)
}

// Handler returns next guarded by the rules. Its signature makes
// m.Handler a func(http.Handler) http.Handler, the shape routers take:
// router.Use(m.Handler).
//
// A rule keyed by Route reads the pattern a ServeMux matched. Around the
// mux, m.Handler(mux), the middleware asks the mux which pattern it will
// route each request to (one more route lookup per request), and the
// rules see it; so they do inside the mux, mux.Handle("GET /items/{id}",
// m.Handler(items)). Any router with the method
// Handler(*http.Request) (http.Handler, string) is asked the same way.
// Around a handler that is not one, a request reaches the rules without a
// pattern: a Route rule then limits nothing, and says so (it is counted
// as rules.OutcomeMisconfigured, not rules.OutcomeNoKey, and its first such request is
// logged at level Error with the fix).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	rt, _ := next.(router)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var (
			d   Decision
			tab *usage.Tab
			err error
		)
		if rt != nil {
			d, tab, err = m.checkRouted(r, rt)
		} else {
			d, tab, err = m.check(r, missingRoute)
		}
		if err != nil {
			// The client left, or the request's deadline passed, while
			// a limiter decided: serving it would be wasted work.
			writeProblem(w, http.StatusServiceUnavailable, 0, reducedCapacity, "The request ended before its rate limits could be checked.", nil)
			return
		}
		h := w.Header()
		m.WriteHeaders(h, &d)
		switch d.Status {
		case http.StatusOK:
			if tab == nil {
				next.ServeHTTP(w, r)
				return
			}
			// A rule settles its cost: the handler reports it in r's
			// context (rules.ReportCost), and it is settled once the
			// handler returns.
			next.ServeHTTP(w, r.WithContext(usage.With(r.Context(), tab)))
			m.eng.Settle(r.Context(), tab)
		case http.StatusTooManyRequests:
			if m.cfg.onLimited != nil {
				h.Set("Cache-Control", "no-store")
				hd := d // a copy for the hook, so that d itself stays on the stack
				m.cfg.onLimited(w, r, &hd)
				return
			}
			detail := fmt.Sprintf("Quota exceeded for %s.", quoteList(d.Violated))
			writeProblem(w, d.Status, d.RetryAfter, quotaExceeded, detail, d.Violated)
		default:
			if m.cfg.onError != nil {
				h.Set("Cache-Control", "no-store")
				hd := d
				m.cfg.onError(w, r, &hd)
				return
			}
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
