package ruleset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// Engine evaluates a list of rules for requests of type R. Check runs the
// rules in order until one rejects the request; a request costs a rule
// only if it is admitted: what the rules before a rejection spent is given
// back to their limiters (Refunder), exactly, so a request one rule denies
// does not use up another rule's quota. Reload swaps the list atomically;
// the limiters keep their state, since a rule's keys depend only on its
// name and the request.
//
// An Engine holds no goroutine and is safe for concurrent use.
type Engine[R any] struct {
	set      atomic.Pointer[set[R]]
	log      *slog.Logger
	describe func(R) string // the request, for log lines

	mu       sync.Mutex // serializes reloads
	counters map[string]*ruleCounters

	fates    [numFates]atomic.Uint64
	duration durations
}

// set is one list of rules, replaced whole by a reload.
type set[R any] struct {
	rules []rule[R]
}

// New returns an Engine enforcing specs, in order. It rejects invalid ones
// with an error naming the rule and field and wrapping ErrInvalidRule.
// describe renders a request for log lines, such as "GET /path"; log
// receives them.
func New[R any](specs []Spec[R], log *slog.Logger, describe func(R) string) (*Engine[R], error) {
	e := &Engine[R]{log: log, describe: describe, counters: map[string]*ruleCounters{}}
	if err := e.Reload(specs); err != nil {
		return nil, err
	}
	return e, nil
}

// Reload replaces the rules with specs, atomically: a request is checked
// against the old list or the new one, never a mix. Invalid specs leave the
// old list in place. A rule whose name stays keeps its counters, and its
// limiter's state, which is keyed by the rule's name.
func (e *Engine[R]) Reload(specs []Spec[R]) error {
	rules := make([]rule[R], len(specs))
	seen := make(map[string]bool, len(specs))
	for i, s := range specs {
		if err := s.check(); err != nil {
			return fmt.Errorf("%w: rules[%d] (%q): %w", ErrInvalidRule, i, s.Name, err)
		}
		if seen[s.Name] {
			return fmt.Errorf("%w: rules[%d] (%q): Name: used by an earlier rule", ErrInvalidRule, i, s.Name)
		}
		seen[s.Name] = true
		rules[i] = compile(s)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	counters := make(map[string]*ruleCounters, len(rules))
	for i := range rules {
		c := e.counters[rules[i].Name]
		if c == nil {
			c = new(ruleCounters)
		}
		rules[i].st, counters[rules[i].Name] = c, c
	}
	e.counters = counters
	e.set.Store(&set[R]{rules: rules})
	return nil
}

// spent is a rule that admitted a request, to be settled once the verdict
// is known: counted as allowed, or refunded.
type spent[R any] struct {
	r     *rule[R]
	key   string
	limit hybridlimit.Limit
	cost  int64
	cand  int // index of its Policy, or -1 when unreported
}

// Check evaluates the rules for req, in order, and returns the verdict. It
// returns an error only when ctx ends during a decision: the request
// should then not be served.
//
// The first enforced rule that denies the request, or whose limiter fails
// under FailClosed, ends the evaluation: later rules are not asked, so a
// rejected request costs them nothing, and the cheapest rule that denies
// most often is best put first. Shadow rules are asked like enforced ones
// but never reject. The tightest rule, reported first, is the denying one
// if any, else the enforced rule with the least Remaining; ties go to the
// earlier rule.
func (e *Engine[R]) Check(ctx context.Context, req R) (Decision, error) {
	start := time.Now()
	d, err := e.check(ctx, req)
	e.duration.observe(time.Since(start))
	switch {
	case err != nil:
		e.fates[fateCanceled].Add(1)
	case d.Verdict == Limited:
		e.fates[fateLimited].Add(1)
	case d.Verdict == Unavailable:
		e.fates[fateUnavailable].Add(1)
	default:
		e.fates[fateAdmitted].Add(1)
	}
	return d, err
}

func (e *Engine[R]) check(ctx context.Context, req R) (Decision, error) {
	s := e.set.Load()
	var (
		d     Decision
		cands = make([]Policy, 0, len(s.rules))
		tight = -1
		held  [8]spent[R]
		spend = held[:0]
	)
rules:
	for i := range s.rules {
		ru := &s.rules[i]
		st := ru.st
		if ru.Match != nil && !ru.Match(req) {
			st.count(OutcomeSkipped)
			continue
		}
		if ru.Exempt != nil && ru.Exempt(req) {
			st.count(OutcomeExempt)
			continue
		}
		key, ok := ru.Key(req)
		if !ok {
			st.count(OutcomeNoKey)
			e.warnNoKey(ctx, ru, req)
			continue
		}
		cost := ru.Cost
		if ru.CostFunc != nil {
			cost = ru.CostFunc(req)
		}
		if cost < 1 {
			st.count(OutcomeSkipped)
			continue
		}
		limit, quota, window := ru.Limit, ru.quota, ru.window
		var err error
		if ru.LimitFunc != nil {
			limit = ru.LimitFunc(req)
			quota, window = ru.policyOf(limit)
			if verr := limit.Validate(); verr != nil {
				err = fmt.Errorf("LimitFunc: %w", verr)
			}
		}
		lkey := ru.limiterKey(key)
		var res hybridlimit.Result
		switch {
		case err != nil:
		case cost > limit.Burst:
			res = beyondBurst(ctx, ru, lkey, limit)
		default:
			if res, err = ru.Limiter.AllowN(ctx, lkey, limit, cost); errors.Is(err, hybridlimit.ErrCostExceedsBurst) {
				// Within the rule's burst but above one part's of a split
				// key: refused as any cost no wait can pay. As an error it
				// went to OnError, and FailOpen let it through uncounted.
				res, err = beyondBurst(ctx, ru, lkey, limit), nil
			}
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				st.errors[ErrorCanceled].Add(1)
				e.settle(ctx, spend, cands, true)
				return Decision{}, cerr
			}
			st.errors[Classify(err)].Add(1)
			closed := ru.OnError == FailClosed && !ru.Shadow
			e.warn(ctx, "limiter failed", "rule", ru.Name, "key", lkey, "policy", ru.OnError.String(), "shadow", ru.Shadow, "err", err)
			if closed {
				st.count(OutcomeErrorClosed)
				d.Verdict, d.RetryAfter = Unavailable, ru.failRetry()
				break rules
			}
			st.count(OutcomeErrorOpen)
			continue
		}
		taken := spent[R]{r: ru, key: lkey, limit: limit, cost: cost, cand: -1}
		switch {
		case res.Source == hybridlimit.SourceFallback && res.Allowed:
			// The limiter's own failure policy decided, Redis being out
			// of reach: nothing is known of the quota, so the rule is not
			// reported.
			spend = append(spend, taken)
			continue
		case res.Source == hybridlimit.SourceFallback && ru.Shadow:
			st.count(OutcomeErrorOpen)
			continue
		case res.Source == hybridlimit.SourceFallback:
			// Its denial is an outage, not a quota the client exceeded,
			// and it stands whatever OnError says: that policy is for
			// errors, this one the limiter's.
			st.count(OutcomeErrorClosed)
			d.Verdict, d.RetryAfter = Unavailable, max(res.RetryAfter, ru.failRetry())
			break rules
		case ru.Shadow && !res.Allowed:
			st.count(OutcomeShadowDenied)
			e.info(ctx, "shadow rule would deny", "rule", ru.Name, "key", lkey, "retry_after", res.RetryAfter)
			continue
		case ru.Shadow:
			spend = append(spend, taken)
			continue
		}
		cands = append(cands, Policy{Name: ru.Name, Quota: quota, Window: window, Unit: ru.QuotaUnit, Result: res, Next: ru.next(res, limit, cost)})
		if tight < 0 || tighter(res, cands[tight].Result) {
			tight = len(cands) - 1
		}
		if !res.Allowed {
			st.count(OutcomeDenied)
			d.Verdict, d.RetryAfter, d.Violated = Limited, res.RetryAfter, []string{ru.Name}
			if e.log.Enabled(ctx, slog.LevelDebug) {
				e.log.DebugContext(ctx, "limited", "rule", ru.Name, "key", lkey, "request", e.describe(req), "retry_after", res.RetryAfter)
			}
			break
		}
		taken.cand = len(cands) - 1
		spend = append(spend, taken)
	}
	e.settle(ctx, spend, cands, d.Verdict != Admit)
	if tight >= 0 {
		d.Policies = cands
		if tight > 0 { // tightest first, the others in rule order
			first := cands[tight]
			copy(cands[1:tight+1], cands[:tight])
			cands[0] = first
		}
	}
	return d, nil
}

// refundTimeout bounds a refund made after the request's context ended.
const refundTimeout = time.Second

// settle counts the rules that admitted the request: allowed if it goes
// on, else refunded (their Policy's Remaining counting the cost again) or
// unrefunded. A refund after ctx has ended runs on a context of its own,
// bounded by refundTimeout: the cost is owed whether or not the client
// stayed.
func (e *Engine[R]) settle(ctx context.Context, spend []spent[R], cands []Policy, rejected bool) {
	if !rejected {
		for i := range spend {
			spend[i].r.st.count(OutcomeAllowed)
		}
		return
	}
	if len(spend) > 0 && ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
		defer cancel()
	}
	for _, sp := range spend {
		st := sp.r.st
		if sp.r.refunder == nil {
			st.count(OutcomeUnrefunded)
			continue
		}
		if err := sp.r.refunder.Refund(ctx, sp.key, sp.limit, sp.cost); err != nil {
			st.errors[Classify(err)].Add(1)
			st.count(OutcomeUnrefunded)
			e.warn(ctx, "refund failed", "rule", sp.r.Name, "key", sp.key, "cost", sp.cost, "err", err)
			continue
		}
		st.count(OutcomeRefunded)
		if sp.cand >= 0 {
			r := &cands[sp.cand].Result
			r.Remaining = min(r.Remaining+sp.cost, sp.limit.Burst)
		}
	}
}

func (e *Engine[R]) warn(ctx context.Context, msg string, args ...any) {
	e.log.WarnContext(ctx, msg, args...)
}

func (e *Engine[R]) info(ctx context.Context, msg string, args ...any) {
	e.log.InfoContext(ctx, msg, args...)
}

// warnNoKey logs, once per rule, a request for which the rule found no
// key: a rule that never finds one limits nothing, silently.
func (e *Engine[R]) warnNoKey(ctx context.Context, ru *rule[R], req R) {
	if ru.st.warnedNoKey.Load() || !ru.st.warnedNoKey.CompareAndSwap(false, true) {
		return
	}
	e.warn(ctx, "rule found no key in a request, and does not apply to it; logged once per rule, counted as outcome no_key",
		"rule", ru.Name, "request", e.describe(req))
}

// beyondBurst denies a request costing more than the rule's burst, which
// no wait admits (the limiter would only say so as an error), so it names
// no retry time. The quota it reports is the key's, read without spending
// where the limiter can: a made-up "nothing left, resets now" sent
// clients back at once, to be denied again. Other limiters report the
// quota unknown as nothing left.
func beyondBurst[R any](ctx context.Context, ru *rule[R], key string, limit hybridlimit.Limit) hybridlimit.Result {
	res := hybridlimit.Result{Limit: limit}
	if ru.peeker != nil {
		if r, err := ru.peeker.Peek(ctx, key, limit); err == nil {
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

// Errors of Reset and KeyOf.
var (
	// ErrUnknownRule: no rule has that name.
	ErrUnknownRule = errors.New("no rule of that name")
	// ErrResetUnsupported: the rule's limiter has no Reset method.
	ErrResetUnsupported = errors.New("the rule's limiter cannot reset a key")
)

// Reset forgets key under the named rule: the rule's next decision for a
// request of that key finds the full quota. key is what the rule's key
// function returns (an address, a user, the digest APIKey makes), not a
// Redis key: the rule's prefix and hashing are applied here.
func (e *Engine[R]) Reset(ctx context.Context, rule, key string) error {
	ru := e.rule(rule)
	if ru == nil {
		return fmt.Errorf("%w: %q", ErrUnknownRule, rule)
	}
	if ru.resetter == nil {
		return fmt.Errorf("%w: %q is %T", ErrResetUnsupported, rule, ru.Limiter)
	}
	return ru.resetter.Reset(ctx, ru.limiterKey(key))
}

// KeyOf returns the key the named rule finds in req, as Reset takes it,
// and false when it finds none.
func (e *Engine[R]) KeyOf(rule string, req R) (string, bool, error) {
	ru := e.rule(rule)
	if ru == nil {
		return "", false, fmt.Errorf("%w: %q", ErrUnknownRule, rule)
	}
	key, ok := ru.Key(req)
	return key, ok, nil
}

func (e *Engine[R]) rule(name string) *rule[R] {
	s := e.set.Load()
	for i := range s.rules {
		if s.rules[i].Name == name {
			return &s.rules[i]
		}
	}
	return nil
}

// Names returns the rules' names, in order.
func (e *Engine[R]) Names() []string {
	s := e.set.Load()
	out := make([]string, len(s.rules))
	for i := range s.rules {
		out[i] = s.rules[i].Name
	}
	return out
}

// Stats returns a snapshot of the counters. Counters are read one by one
// while requests go on, so the snapshot is not atomic as a whole.
func (e *Engine[R]) Stats() Stats {
	s := e.set.Load()
	out := Stats{
		Admitted:      e.fates[fateAdmitted].Load(),
		Limited:       e.fates[fateLimited].Load(),
		Unavailable:   e.fates[fateUnavailable].Load(),
		Canceled:      e.fates[fateCanceled].Load(),
		CheckDuration: e.duration.snapshot(),
		Rules:         make([]RuleStats, len(s.rules)),
	}
	for i := range s.rules {
		ru, rs := &s.rules[i], &out.Rules[i]
		rs.Name, rs.Limiter, rs.Shadow = ru.Name, ru.kind, ru.Shadow
		for o := range rs.Outcomes {
			rs.Outcomes[o] = ru.st.outcomes[o].Load()
		}
		for c := range rs.Errors {
			rs.Errors[c] = ru.st.errors[c].Load()
		}
	}
	return out
}
