package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
)

// FailurePolicy says what a rule does when its Limiter returns an error
// instead of a decision: Redis unreachable for an exact limiter, a closed
// hybrid limiter, an invalid key.
//
// The hybrid limiter of package sync has failure policies of its own for
// Redis outages (fall back to a local share of the limit, by default) and
// answers with decisions rather than errors, so for it this policy only
// covers what that one cannot decide. Its policy's denials (Result.Source
// hybridlimit.SourceFallback) are answered 503 like FailClosed, whatever
// this policy says: the quota could not be checked, and that policy chose
// to deny.
type FailurePolicy int

const (
	// FailOpen (the default) lets the request through as far as this rule
	// is concerned. The rule is left out of the RateLimit fields, since
	// nothing is known of its quota, and the failure is counted and logged.
	FailOpen FailurePolicy = iota
	// FailClosed rejects the request with 503 Service Unavailable and a
	// temporary-reduced-capacity problem, not 429: the client has not
	// exceeded any quota, the server could not check it.
	FailClosed
)

func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// Quota units a rule can announce in RateLimit-Policy's qu parameter.
const (
	UnitRequests           = "requests"
	UnitContentBytes       = "content-bytes"
	UnitConcurrentRequests = "concurrent-requests"
)

// MaxRuleNameLen bounds a rule's name, in bytes.
const MaxRuleNameLen = 64

// A Rule is one quota policy: Limit per key, the key being what Key returns
// for the request. A request that a rule applies to spends Cost from that
// key's quota in Limiter.
//
// The zero Rule is invalid: Name, Limiter, Limit and Key are required, and
// New rejects a rule without them.
type Rule struct {
	// Name names the policy in the RateLimit fields, the problem body's
	// violated-policies, logs and metrics, and keeps its keys apart from
	// other rules' in a shared Limiter. Printable ASCII, 1 to
	// MaxRuleNameLen bytes, unique among the rules. Example: "per-ip".
	Name string
	// Limiter decides. Rules may share one.
	Limiter Limiter
	// Limit is the quota: hybridlimit.PerMinute(100) is 100 a minute.
	Limit hybridlimit.Limit
	// Key says whose quota a request spends; see KeyFunc.
	Key KeyFunc
	// Cost is what a request spends, 1 to Limit.Burst; 0 means 1.
	Cost int64
	// CostFunc, when set, replaces Cost per request: for example the
	// request's declared size for a content-bytes quota. A result below 1
	// means the request is free under this rule, which is then skipped; a
	// result above Limit.Burst is denied, since no wait would admit it.
	CostFunc func(r *http.Request) int64
	// Shadow counts and logs the rule's decisions but never rejects a
	// request for it, and leaves it out of the response fields: a way to
	// try a new limit on live traffic.
	Shadow bool
	// Match, when set, limits the rule to the requests it returns true
	// for, such as one route: Match: PathPrefixes("/search"). Other
	// requests are counted as OutcomeNoKey. See match.go for predicates.
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

// ErrInvalidRule is wrapped by the errors New returns for an invalid rule.
var ErrInvalidRule = errors.New("httplimit: invalid rule")

// check validates the rule; its errors start with the field's name.
func (r *Rule) check() error {
	if err := checkName(r.Name); err != nil {
		return fmt.Errorf("Name: %w", err)
	}
	switch {
	case r.Limiter == nil:
		return errors.New("Limiter: nil")
	case r.Key == nil:
		return errors.New("Key: nil")
	case r.OnError != FailOpen && r.OnError != FailClosed:
		return fmt.Errorf("OnError: unknown failure policy %d", int(r.OnError))
	case r.FailRetry < 0:
		return fmt.Errorf("FailRetry: %v is negative", r.FailRetry)
	}
	if err := r.Limit.Validate(); err != nil {
		return fmt.Errorf("Limit: %w", err)
	}
	if r.Cost != 0 {
		if err := r.Limit.CheckCost(r.Cost); err != nil {
			return fmt.Errorf("Cost: %w", err)
		}
	}
	switch r.QuotaUnit {
	case "", UnitRequests, UnitContentBytes, UnitConcurrentRequests:
	default:
		return fmt.Errorf("QuotaUnit: %q is not %q, %q or %q", r.QuotaUnit, UnitRequests, UnitContentBytes, UnitConcurrentRequests)
	}
	return nil
}

// checkName reports whether name can be a policy name: it goes into an sf-string,
// which holds printable ASCII only.
func checkName(name string) error {
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

// window returns the quota and window, in whole seconds, that
// RateLimit-Policy announces for the rule: a window algorithm admits Burst
// per Period; a token bucket admits Burst at once and refills it in
// Limit.Refill, which keeps both the burst and the long-run rate. A window
// that is not a whole number of seconds is rounded up, which understates
// the rate a client may use, never overstates it.
func (r *Rule) window() (q, w int64) {
	d := r.Limit.Refill()
	// global.Limiter and sharding.Global say their algorithm.
	if g, ok := r.Limiter.(interface{ Algorithm() global.Algorithm }); ok {
		switch g.Algorithm() {
		case global.FixedWindow, global.SlidingWindow, global.SlidingLog:
			d = r.Limit.Period
		}
	}
	return r.Limit.Burst, max(ceilSeconds(d), 1)
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second) // not (d + time.Second - 1): it overflows near the largest d
	if d%time.Second != 0 {
		s++
	}
	return s
}
