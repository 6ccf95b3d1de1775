package httplimit

import (
	"errors"
	"net/http"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/ruleset"
)

// FailurePolicy says what a rule does when its Limiter returns an error
// instead of a decision: Redis unreachable for an exact limiter, a closed
// hybrid limiter, an invalid key or limit.
//
// The hybrid limiter of package sync has failure policies of its own for
// Redis outages (fall back to a local share of the limit, by default) and
// answers with decisions rather than errors, so for it this policy only
// covers what that one cannot decide. Its policy's denials (Result.Source
// hybridlimit.SourceFallback) are answered 503 like FailClosed, whatever
// this policy says: the quota could not be checked, and that policy chose
// to deny.
type FailurePolicy = ruleset.FailurePolicy

const (
	// FailOpen (the default) lets the request through as far as this rule
	// is concerned. The rule is left out of the RateLimit fields, since
	// nothing is known of its quota, and the failure is counted and logged.
	FailOpen = ruleset.FailOpen
	// FailClosed rejects the request with 503 Service Unavailable and a
	// temporary-reduced-capacity problem, not 429: the client has not
	// exceeded any quota, the server could not check it.
	FailClosed = ruleset.FailClosed
)

// Quota units a rule can announce in RateLimit-Policy's qu parameter.
const (
	UnitRequests           = ruleset.UnitRequests
	UnitContentBytes       = ruleset.UnitContentBytes
	UnitConcurrentRequests = ruleset.UnitConcurrentRequests
)

// MaxRuleNameLen bounds a rule's name, in bytes.
const MaxRuleNameLen = ruleset.MaxRuleNameLen

// A Rule is one quota policy: Limit per key, the key being what Key returns
// for the request. A request that a rule applies to spends Cost from that
// key's quota in Limiter, and keeps it spent only if the request is
// admitted (see Middleware.Check).
//
// The zero Rule is invalid: Name, Limiter, Limit (or LimitFunc) and Key are
// required, and New rejects a rule without them.
type Rule struct {
	// Name names the policy in the RateLimit fields, the problem body's
	// violated-policies, logs and metrics, and keeps its keys apart from
	// other rules' in a shared Limiter. Printable ASCII, 1 to
	// MaxRuleNameLen bytes, unique among the rules. Example: "per-ip".
	Name string
	// Limiter decides. Rules may share one. New refuses a nil one, a
	// typed nil such as (*global.Limiter)(nil), and the zero values of
	// this module's limiters, which would fail every decision.
	Limiter Limiter
	// Limit is the quota: hybridlimit.PerMinute(100) is 100 a minute.
	// Required unless LimitFunc is set.
	Limit hybridlimit.Limit
	// LimitFunc, when set, gives the limit per request, such as a plan
	// tier's: func(r *http.Request) hybridlimit.Limit { return tiers[plan(r)] }.
	// A key keeps its tokens when its limit changes (see package global).
	// An invalid limit is an error of the rule, decided by OnError and
	// counted as ErrorInvalid.
	LimitFunc func(r *http.Request) hybridlimit.Limit
	// Key says whose quota a request spends; see KeyFunc.
	Key KeyFunc
	// Cost is what a request spends, 1 to Limit.Burst; 0 means 1.
	Cost int64
	// CostFunc, when set, replaces Cost per request: for example the
	// request's declared size for a content-bytes quota. A result below 1
	// means the request is free under this rule, which is then skipped; a
	// result above the limit's burst is denied, since no wait would admit
	// it.
	CostFunc func(r *http.Request) int64
	// Shadow counts and logs the rule's decisions but never rejects a
	// request for it, and leaves it out of the response fields: a way to
	// try a new limit on live traffic. What a shadow rule spent is given
	// back when another rule rejects the request, as an enforced rule's.
	Shadow bool
	// Match, when set, limits the rule to the requests it returns true
	// for, such as one route: Match: PathPrefixes("/search"). Other
	// requests are counted as OutcomeSkipped. See match.go for predicates.
	Match func(r *http.Request) bool
	// Exempt, when set, lets requests for which it returns true bypass the
	// rule, counted as OutcomeExempt and not reported: Exempt:
	// ClientPrefixes(res, internal...).
	Exempt func(r *http.Request) bool
	// OnError is the rule's failure policy (default FailOpen).
	OnError FailurePolicy
	// FailRetry is the Retry-After sent when OnError is FailClosed and the
	// Limiter failed; 0 means one second.
	FailRetry time.Duration
	// QuotaUnit, if set, is announced as RateLimit-Policy's qu parameter:
	// UnitRequests, UnitContentBytes or UnitConcurrentRequests.
	QuotaUnit string
}

// ErrInvalidRule is wrapped by the errors New and Reload return for an
// invalid rule.
var ErrInvalidRule = ruleset.ErrInvalidRule

// spec compiles r for the engine.
func (r *Rule) spec() ruleset.Spec[*http.Request] {
	s := ruleset.Spec[*http.Request]{
		Name: r.Name, Limiter: r.Limiter, Limit: r.Limit, LimitFunc: r.LimitFunc, Cost: r.Cost, CostFunc: r.CostFunc,
		Shadow: r.Shadow, Match: r.Match, Exempt: r.Exempt, OnError: r.OnError, FailRetry: r.FailRetry, QuotaUnit: r.QuotaUnit,
	}
	if r.Key != nil {
		s.Key = r.Key
	}
	return s
}

func specs(rules []Rule) []ruleset.Spec[*http.Request] {
	out := make([]ruleset.Spec[*http.Request], len(rules))
	for i := range rules {
		out[i] = rules[i].spec()
	}
	return out
}

// checkName reports whether name can be a policy name.
func checkName(name string) error { return ruleset.CheckName(name) }

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 { return ruleset.CeilSeconds(d) }

var errNilLogger = errors.New("httplimit: nil logger")
