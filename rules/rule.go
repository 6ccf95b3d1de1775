package rules

import (
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

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
// key's quota in Limiter, and keeps it spent only if the request is
// admitted: when a later rule rejects it, what the earlier rules spent is
// given back.
//
// R is the front end's request: httplimit.Rule is Rule[*http.Request],
// grpclimit.Rule is Rule[*grpclimit.Call]. A front end rejects a request an
// enforced rule denies as limited (HTTP 429, gRPC ResourceExhausted) and
// one whose limit could not be checked as unavailable (HTTP 503, gRPC
// Unavailable).
//
// The zero Rule is invalid: Name, Limiter, Limit (or LimitFunc) and Key are
// required, and the front ends' New and Reload reject a rule without them.
type Rule[R any] struct {
	// Name names the policy in the RateLimit fields, the violated policies
	// of a rejection, logs and metrics, and keeps its keys apart from
	// other rules' in a shared Limiter. Printable ASCII, 1 to
	// MaxRuleNameLen bytes, unique among the rules. Example: "per-ip".
	Name string
	// Limiter decides: *sync.Limiter (hybrid), *global.Limiter and
	// *sharding.Global (exact), Local, or any hybridlimit.Limiter. Rules
	// may share one. A nil one, a typed nil such as
	// (*global.Limiter)(nil), and the zero values of this module's
	// limiters, which would fail every decision, are refused. A limiter
	// that is also a hybridlimit.Refunder is given back what a request
	// spent when a later rule rejects it; a hybridlimit.Resetter can
	// forget a key (the front ends' Reset); a hybridlimit.Describer names
	// its kind in logs and metrics ("custom" otherwise) and says how its
	// quota comes back.
	Limiter hybridlimit.Limiter
	// Limit is the quota: hybridlimit.PerMinute(100) is 100 a minute.
	// Required unless LimitFunc is set.
	Limit hybridlimit.Limit
	// LimitFunc, when set, gives the limit per request, such as a plan
	// tier's. A key keeps its tokens when its limit changes (see package
	// global). An invalid limit is an error of the rule, decided by
	// OnError and counted as hybridlimit.ErrorInvalid.
	LimitFunc func(R) hybridlimit.Limit
	// Key says whose quota a request spends: the key, or false when the
	// request has none, and the rule then does not apply (OutcomeNoKey).
	// The front ends build keys from request parts: httplimit.IP,
	// grpclimit.Method, and so on.
	Key func(R) (string, bool)
	// Cost is what a request spends, 1 to Limit.Burst; 0 means 1.
	Cost int64
	// CostFunc, when set, replaces Cost per request: for example the
	// request's declared size for a content-bytes quota, or an estimate
	// from its max_tokens for a token quota. A result below 1 means the
	// request is free under this rule, which is then skipped; a result
	// above the limit's burst is denied, since no wait would admit it.
	CostFunc func(R) int64
	// Settle makes the cost a request spends an estimate, settled to the
	// actual cost its handler reports (ReportCost) once the handler
	// returns: what it used beyond the estimate is charged whatever the
	// key holds, into debt if need be, and what it did not use is given
	// back. For usage known only after the work, such as the tokens of an
	// LLM's reply. A request whose handler reports nothing keeps the
	// estimate. The front ends' handlers settle (httplimit's Handler,
	// grpclimit's interceptors); a request decided by a Check of your
	// own keeps the estimate. The Limiter must be a hybridlimit.Charger
	// and a hybridlimit.Refunder.
	Settle bool
	// Shadow counts and logs the rule's decisions but never rejects a
	// request for it, and leaves it out of the response fields: a way to
	// try a new limit on live traffic. What a shadow rule spent is given
	// back when another rule rejects the request, as an enforced rule's.
	Shadow bool
	// Match, when set, limits the rule to the requests it returns true
	// for, such as one route or method. Other requests are counted as
	// OutcomeSkipped.
	Match func(R) bool
	// Exempt, when set, lets requests for which it returns true bypass the
	// rule, counted as OutcomeExempt and not reported.
	Exempt func(R) bool
	// OnError says what the rule does when its Limiter returns an error
	// instead of a decision (Redis unreachable for an exact limiter, a
	// closed hybrid limiter, an invalid key or limit): hybridlimit.FailOpen
	// lets the request through as far as this rule is concerned, leaves
	// the rule out of the RateLimit fields and counts and logs the
	// failure; hybridlimit.FailClosed rejects it as unavailable, not
	// limited (the client has not exceeded any quota, the server could not
	// check it). The zero value, hybridlimit.FallbackLocal, leaves Redis
	// outages to the limiter's own policy and lets through what it still
	// cannot decide, as FailOpen.
	//
	// The hybrid limiter of package sync answers Redis outages with
	// decisions of its own failure policy rather than errors. A denial by
	// its fallback share is answered as any limit's, with its wait: the
	// request is over this instance's part of the limit. A denial by its
	// FailClosed policy (Result.FailedClosed) is answered as unavailable,
	// whatever OnError says: the user chose to refuse what cannot be
	// checked.
	OnError hybridlimit.FailurePolicy
	// FailRetry is the wait announced (HTTP Retry-After, gRPC RetryInfo)
	// when OnError is FailClosed and the Limiter failed; 0 means one
	// second.
	FailRetry time.Duration
	// QuotaUnit, if set, is announced as RateLimit-Policy's qu parameter:
	// UnitRequests, UnitContentBytes or UnitConcurrentRequests.
	QuotaUnit string
}

// ErrInvalidRule is wrapped by the errors the front ends' New and Reload
// return for an invalid rule.
var ErrInvalidRule = errors.New("invalid rule")

// Validate reports why the rule cannot limit, if it cannot; its errors
// start with the field's name.
func (s *Rule[R]) Validate() error {
	if err := CheckName(s.Name); err != nil {
		return fmt.Errorf("Name: %w", err)
	}
	if err := usable(s.Limiter); err != nil {
		return fmt.Errorf("Limiter: %w", err)
	}
	switch {
	case s.Key == nil:
		return errors.New("Key: nil")
	case s.OnError != hybridlimit.FallbackLocal && s.OnError != hybridlimit.FailOpen && s.OnError != hybridlimit.FailClosed:
		return fmt.Errorf("OnError: failure policy %v is not FallbackLocal, FailOpen or FailClosed", s.OnError)
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
	if s.Settle {
		_, charges := s.Limiter.(hybridlimit.Charger)
		_, refunds := s.Limiter.(hybridlimit.Refunder)
		if !charges || !refunds {
			return fmt.Errorf("Settle: a %T cannot charge and refund", s.Limiter)
		}
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
