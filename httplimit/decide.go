package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hybridlimit/hybridlimit"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// Outcome is what one rule made of one request.
type Outcome int

const (
	// OutcomeAllowed: the rule's limiter admitted the request.
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: an enforced rule's limiter denied the request.
	OutcomeDenied
	// OutcomeShadowDenied: a shadow rule's limiter denied; the request
	// went on as far as this rule is concerned.
	OutcomeShadowDenied
	// OutcomeExempt: the rule's Exempt function exempted the request.
	OutcomeExempt
	// OutcomeNoKey: the rule did not apply: Match said no, the key
	// function found no key, or the cost was below 1.
	OutcomeNoKey
	// OutcomeErrorOpen: the limiter failed and the rule let the request
	// through (FailOpen, or a shadow rule, also when the limiter's own
	// failure policy denied).
	OutcomeErrorOpen
	// OutcomeErrorClosed: the limiter failed and the rule rejected the
	// request (FailClosed), or the limiter's own failure policy denied
	// it (Result.Source is hybridlimit.SourceFallback).
	OutcomeErrorClosed
	// NumOutcomes is the number of outcomes, for arrays indexed by them.
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{
	"allowed", "denied", "shadow_denied", "exempt", "no_key", "error_open", "error_closed",
}

// String returns the outcome's name as metrics label it, such as "shadow_denied".
func (o Outcome) String() string {
	if o >= 0 && o < NumOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// ErrorClass sorts the errors a Limiter returns, for metrics.
type ErrorClass int

const (
	// ErrorUnavailable: Redis could not answer (hybridlimit.ErrUnavailable).
	ErrorUnavailable ErrorClass = iota
	// ErrorClosed: the limiter was closed (sync.ErrClosed).
	ErrorClosed
	// ErrorInvalid: the limiter rejected the key, limit or cost.
	ErrorInvalid
	// ErrorCanceled: the request's context ended during the decision.
	ErrorCanceled
	// ErrorOther: anything else.
	ErrorOther
	// NumErrorClasses is the number of classes.
	NumErrorClasses
)

var errorClassNames = [NumErrorClasses]string{"unavailable", "closed", "invalid", "canceled", "other"}

// String returns the class's name, such as "unavailable".
func (c ErrorClass) String() string {
	if c >= 0 && c < NumErrorClasses {
		return errorClassNames[c]
	}
	return fmt.Sprintf("ErrorClass(%d)", int(c))
}

// Classify returns the class of a limiter's error.
func Classify(err error) ErrorClass {
	switch {
	case errors.Is(err, hybridlimit.ErrUnavailable):
		return ErrorUnavailable
	case errors.Is(err, hlsync.ErrClosed):
		return ErrorClosed
	case errors.Is(err, hybridlimit.ErrInvalidKey), errors.Is(err, hybridlimit.ErrInvalidLimit),
		errors.Is(err, hybridlimit.ErrInvalidCost), errors.Is(err, hybridlimit.ErrCostExceedsBurst):
		return ErrorInvalid
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ErrorCanceled
	}
	return ErrorOther
}

// Policy is one rule's state as the response fields report it.
type Policy struct {
	// Name is the rule's name.
	Name string
	// Quota and Window are RateLimit-Policy's q and w: Quota units per
	// Window seconds.
	Quota, Window int64
	// Unit is RateLimit-Policy's qu, or "" for the default, requests.
	Unit string
	// Result is the rule's limiter's answer for this request.
	Result hybridlimit.Result
}

// Decision is the middleware's verdict on one request.
type Decision struct {
	// Status is http.StatusOK when the request may proceed,
	// http.StatusTooManyRequests when an enforced rule denied it, and
	// http.StatusServiceUnavailable when a FailClosed rule's limiter
	// failed, or an enforced rule's limiter denied by its own failure
	// policy (Result.Source hybridlimit.SourceFallback), and no rule
	// denied.
	Status int
	// RetryAfter is how long the client should wait: the longest wait
	// among the denying rules; on a 503, the longest FailRetry among the
	// failed rules, or the limiter's wait where that is longer. 0 when
	// the request may proceed, and also on a denial that no wait can
	// lift (a cost above the rule's burst).
	RetryAfter time.Duration
	// Policies are the rules to report in the response fields, tightest
	// first: the tightest alone unless WithAllPolicies.
	Policies []Policy
	// Violated names the enforced rules that denied the request, in rule order.
	Violated []string
}

// Allowed reports whether the request may proceed.
func (d *Decision) Allowed() bool { return d.Status == http.StatusOK }

// Check evaluates the rules for r, spending from every quota that applies,
// and returns the verdict without writing anything. The Handler calls it;
// call it yourself to render the verdict another way. It returns an error
// only when r's context ends during a decision: the request should then
// not be served.
//
// Rules are evaluated in the order given, every one of them, even after a
// denial, so the response reports the true wait (the longest among the
// denying rules) and shadow rules count every request. The price is that a
// request one rule rejects still spends from the other rules' quotas, as
// with Envoy's descriptors. Evaluation is sequential: an exact (global)
// rule costs one Redis round trip each, a hybrid or local one usually none.
// The order decides ties and the order of the reported policies.
//
// The tightest rule, reported first, is among the denying enforced rules
// the one with the longest RetryAfter; when none denies, the enforced rule
// with the least Remaining. Ties go to the earlier rule.
func (m *Middleware) Check(r *http.Request) (Decision, error) {
	ctx := r.Context()
	d := Decision{Status: http.StatusOK}
	var (
		cands      = make([]Policy, 0, len(m.rules))
		tight      = -1
		unavailRet time.Duration
		failed     bool
	)
	for i := range m.rules {
		rule := &m.rules[i]
		st := &m.stats.rules[i]
		if rule.Match != nil && !rule.Match(r) {
			st.outcomes[OutcomeNoKey].Add(1)
			continue
		}
		if rule.Exempt != nil && rule.Exempt(r) {
			st.outcomes[OutcomeExempt].Add(1)
			continue
		}
		key, ok := rule.Key(r)
		cost := rule.Cost
		if rule.CostFunc != nil {
			cost = rule.CostFunc(r)
		}
		if !ok || cost < 1 {
			st.outcomes[OutcomeNoKey].Add(1)
			continue
		}
		lkey := rule.limiterKey(key)
		var res hybridlimit.Result
		var err error
		if cost > rule.Limit.Burst {
			res = beyondBurst(ctx, rule, lkey)
		} else if res, err = rule.Limiter.AllowN(ctx, lkey, rule.Limit, cost); errors.Is(err, hybridlimit.ErrCostExceedsBurst) {
			// Within the rule's burst but above one part's of a split
			// key: refused as any cost no wait can pay. As an error it
			// went to OnError, and FailOpen let it through uncounted.
			res, err = beyondBurst(ctx, rule, lkey), nil
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				st.errors[ErrorCanceled].Add(1)
				return Decision{}, cerr
			}
			st.errors[Classify(err)].Add(1)
			if rule.OnError == FailClosed && !rule.Shadow {
				st.outcomes[OutcomeErrorClosed].Add(1)
				failed = true
				unavailRet = max(unavailRet, rule.failRetry())
			} else {
				st.outcomes[OutcomeErrorOpen].Add(1)
			}
			m.cfg.logger.Warn("httplimit: limiter failed", "rule", rule.Name, "key", lkey,
				"policy", rule.OnError.String(), "shadow", rule.Shadow, "err", err)
			continue
		}
		if res.Source == hybridlimit.SourceFallback {
			// The limiter's own failure policy decided, Redis being out of
			// reach: nothing is known of the quota, so the rule is not
			// reported, and its denial is an outage (503), not a quota the
			// client exceeded (429). The denial stands whatever OnError
			// says: that policy is for errors, this one the limiter's.
			if res.Allowed {
				st.outcomes[OutcomeAllowed].Add(1)
			} else if rule.Shadow {
				st.outcomes[OutcomeErrorOpen].Add(1)
			} else {
				st.outcomes[OutcomeErrorClosed].Add(1)
				failed = true
				unavailRet = max(unavailRet, res.RetryAfter, rule.failRetry())
			}
			continue
		}
		switch {
		case rule.Shadow && !res.Allowed:
			st.outcomes[OutcomeShadowDenied].Add(1)
			m.cfg.logger.Info("httplimit: shadow rule would deny", "rule", rule.Name, "key", lkey,
				"retry_after", res.RetryAfter)
			continue
		case rule.Shadow:
			st.outcomes[OutcomeAllowed].Add(1)
			continue
		case res.Allowed:
			st.outcomes[OutcomeAllowed].Add(1)
		default:
			st.outcomes[OutcomeDenied].Add(1)
			d.Violated = append(d.Violated, rule.Name)
		}
		cands = append(cands, Policy{Name: rule.Name, Quota: rule.quota, Window: rule.window, Unit: rule.QuotaUnit, Result: res})
		if tight < 0 || tighter(res, cands[tight].Result) {
			tight = len(cands) - 1
		}
	}
	switch {
	case len(d.Violated) > 0:
		d.Status = http.StatusTooManyRequests
		d.RetryAfter = cands[tight].Result.RetryAfter
	case failed:
		d.Status = http.StatusServiceUnavailable
		d.RetryAfter = unavailRet
	}
	if tight >= 0 {
		if m.cfg.reportAll {
			d.Policies = append(cands[tight:tight+1:tight+1], append(cands[:tight:tight], cands[tight+1:]...)...)
		} else {
			d.Policies = cands[tight : tight+1 : tight+1]
		}
	}
	return d, nil
}

// peeker is a Limiter that reports a key's state without spending
// (global.Limiter, sharding.Global, Local).
type peeker interface {
	Peek(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error)
}

// beyondBurst denies a request costing more than the rule's burst, which
// no wait admits (the limiter would only say so as an error), so it names
// no retry time. The quota it reports is the key's, read without spending
// where the limiter can: a made-up "nothing left, resets now" sent
// clients back at once, to be denied again. Other limiters report the
// quota unknown as nothing left.
func beyondBurst(ctx context.Context, ru *rule, key string) hybridlimit.Result {
	res := hybridlimit.Result{Limit: ru.Limit}
	if p, ok := ru.Limiter.(peeker); ok {
		if r, err := p.Peek(ctx, key, ru.Limit); err == nil {
			res = r
		}
	}
	res.Allowed, res.RetryAfter = false, 0
	return res
}

// tighter reports whether a is tighter than b: a denial beats an
// admission, a longer wait beats a shorter one, and among admissions the
// least remaining is tightest.
func tighter(a, b hybridlimit.Result) bool {
	switch {
	case a.Allowed != b.Allowed:
		return !a.Allowed
	case !a.Allowed:
		return a.RetryAfter > b.RetryAfter
	}
	return a.Remaining < b.Remaining
}
