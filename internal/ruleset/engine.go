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
	"github.com/hybridlimit/hybridlimit/internal/histogram"
	"github.com/hybridlimit/hybridlimit/internal/usage"
	"github.com/hybridlimit/hybridlimit/rules"
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
	duration histogram.Recorder
}

// set is one list of rules, replaced whole by a reload.
type set[R any] struct {
	rules []rule[R]
}

// New returns an Engine enforcing specs, in order. It rejects invalid ones
// with an error naming the rule and field and wrapping ErrInvalidRule.
// describe renders a request for log lines, such as "GET /path"; log
// receives them.
func New[R any](specs []rules.Rule[R], log *slog.Logger, describe func(R) string) (*Engine[R], error) {
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
func (e *Engine[R]) Reload(specs []rules.Rule[R]) error {
	list := make([]rule[R], len(specs))
	seen := make(map[string]bool, len(specs))
	for i, s := range specs {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("%w: rules[%d] (%q): %w", rules.ErrInvalidRule, i, s.Name, err)
		}
		if seen[s.Name] {
			return fmt.Errorf("%w: rules[%d] (%q): Name: used by an earlier rule", rules.ErrInvalidRule, i, s.Name)
		}
		seen[s.Name] = true
		list[i] = compile(s)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	counters := make(map[string]*ruleCounters, len(list))
	for i := range list {
		c := e.counters[list[i].Name]
		if c == nil {
			c = new(ruleCounters)
		}
		list[i].st, counters[list[i].Name] = c, c
	}
	e.counters = counters
	e.set.Store(&set[R]{rules: list})
	return nil
}

// spent is a rule that admitted a request, to be settled once the verdict
// is known: counted as allowed, or refunded.
type spent[R any] struct {
	i     int // the rule's index, its application's
	r     *rule[R]
	key   string
	limit hybridlimit.Limit
	cost  int64
	cand  int // index of its Policy, or -1 when unreported
}

// A Probe tells a rule whose key function found no key in req because the
// front end was not set up to give the function what it reads (such as a
// route pattern, which HTTP knows only after routing) from one whose
// request lacks it. It returns the fix to log, or "" for an ordinary
// missing key. It is asked only on that path, so it costs the requests
// that find their keys nothing.
type Probe[R any] func(key func(R) (string, bool), req R) (fix string)

// Options are a front end's settings for one Check.
type Options[R any] struct {
	// Probe, when not nil, is asked about each rule that finds no key in
	// the request: a rule it names misconfigured is counted
	// OutcomeMisconfigured, else OutcomeNoKey.
	Probe Probe[R]
	// AllPolicies reports every enforced rule that decided, tightest
	// first; without it Decision.Policies holds the tightest alone.
	AllPolicies bool
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
// earlier rule. A reported rule left with nothing (Remaining 0) always has
// a Policy.Next: see rule.untilMore for what that may cost.
func (e *Engine[R]) Check(ctx context.Context, req R, opts Options[R]) (Decision, error) {
	start := time.Now()
	d, err := e.check(ctx, req, opts)
	e.duration.Observe(&checkDuration, int64(time.Since(start)))
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

// origin is where a candidate Policy came from, to ask its limiter again.
type origin[R any] struct {
	r     *rule[R]
	key   string
	limit hybridlimit.Limit
}

func (e *Engine[R]) check(ctx context.Context, req R, opts Options[R]) (Decision, error) {
	s := e.set.Load()
	var (
		d       Decision
		cands   = make([]rules.Policy, 0, len(s.rules))
		tight   = -1
		held    [8]spent[R]
		spend   = held[:0]
		from    [8]origin[R]
		origins = from[:0]
	)
	// Each rule is an application, asked in order until one rejects the
	// request (AfterStop); the rules before it give back what they spent.
	ask := func(i int, _ bool) (Answer, error) {
		ru := &s.rules[i]
		st := ru.st
		if ru.Match != nil && !ru.Match(req) {
			st.count(rules.OutcomeSkipped)
			return Answer{}, nil
		}
		if ru.Exempt != nil && ru.Exempt(req) {
			st.count(rules.OutcomeExempt)
			return Answer{}, nil
		}
		key, ok := ru.Key(req)
		if !ok {
			if opts.Probe != nil {
				if fix := opts.Probe(ru.Key, req); fix != "" {
					st.count(rules.OutcomeMisconfigured)
					e.warnMisconfigured(ctx, ru, req, fix)
					return Answer{}, nil
				}
			}
			st.count(rules.OutcomeNoKey)
			e.warnNoKey(ctx, ru, req)
			return Answer{}, nil
		}
		cost := ru.Cost
		if ru.CostFunc != nil {
			cost = ru.CostFunc(req)
		}
		if cost < 1 {
			st.count(rules.OutcomeSkipped)
			return Answer{}, nil
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
				st.errors[hybridlimit.ErrorCanceled].Add(1)
				return Answer{}, cerr
			}
			st.errors[rules.Classify(err)].Add(1)
			closed := ru.OnError == hybridlimit.FailClosed && !ru.Shadow
			e.warn(ctx, "limiter failed", "rule", ru.Name, "key", lkey, "policy", ru.OnError.String(), "shadow", ru.Shadow, "err", err)
			if closed {
				st.count(rules.OutcomeErrorClosed)
				d.Verdict, d.RetryAfter = Unavailable, ru.failRetry()
				return Answer{Halt: true}, nil
			}
			st.count(rules.OutcomeErrorOpen)
			return Answer{}, nil
		}
		taken := spent[R]{i: i, r: ru, key: lkey, limit: limit, cost: cost, cand: -1}
		spends := Answer{Spent: Spend{Limiter: ru.Limiter, Key: lkey, Limit: limit, Cost: cost}}
		switch {
		case res.Source == hybridlimit.SourceFallback && res.Allowed:
			// The limiter's own failure policy decided, Redis being out
			// of reach: nothing is known of the quota, so the rule is not
			// reported.
			spend = append(spend, taken)
			return spends, nil
		case res.FailedClosed && !res.Allowed && ru.Shadow:
			st.count(rules.OutcomeErrorOpen)
			return Answer{}, nil
		case res.FailedClosed && !res.Allowed:
			// The user's FailClosed policy refused what it could not
			// check: an outage, not a quota the client exceeded, and it
			// stands whatever OnError says (that policy is for errors,
			// this one the limiter's).
			st.count(rules.OutcomeErrorClosed)
			d.Verdict, d.RetryAfter = Unavailable, max(res.RetryAfter, ru.failRetry())
			return Answer{Halt: true}, nil
		case res.Source == hybridlimit.SourceFallback:
			// A fallback share's denial: over a limit, if only this
			// instance's part of it, so a limit's denial like any other.
			res = fallbackDenial(res, ru)
		}
		switch {
		case ru.Shadow && !res.Allowed:
			st.count(rules.OutcomeShadowDenied)
			e.info(ctx, "shadow rule would deny", "rule", ru.Name, "key", lkey, "retry_after", res.RetryAfter)
			return Answer{Denied: true, Shadow: true}, nil
		case ru.Shadow:
			spend = append(spend, taken)
			return spends, nil
		}
		cands = append(cands, rules.Policy{Name: ru.Name, Quota: quota, Window: window, Unit: ru.QuotaUnit, Result: res, Next: ru.next(res, limit, cost)})
		origins = append(origins, origin[R]{r: ru, key: lkey, limit: limit})
		if tight < 0 || tighter(res, cands[tight].Result) {
			tight = len(cands) - 1
		}
		if !res.Allowed {
			st.count(rules.OutcomeDenied)
			d.Verdict, d.RetryAfter, d.Violated = Limited, res.RetryAfter, []string{ru.Name}
			if e.log.Enabled(ctx, slog.LevelDebug) {
				e.log.DebugContext(ctx, "limited", "rule", ru.Name, "key", lkey, "request", e.describe(req), "retry_after", res.RetryAfter)
			}
			return Answer{Denied: true}, nil
		}
		taken.cand = len(cands) - 1
		spend = append(spend, taken)
		return spends, nil
	}
	rejected, err := Decide(ctx, len(s.rules), DecideOptions{After: AfterStop, GiveBackOnError: true}, ask, func(i int, err error) {
		e.gaveBack(ctx, spend, cands, i, err)
	})
	if err != nil {
		return Decision{}, err
	}
	if !rejected {
		var items []usage.Item
		for i := range spend {
			sp := &spend[i]
			sp.r.st.count(rules.OutcomeAllowed)
			if sp.r.Settle {
				items = append(items, usage.Item{Rule: sp.r.Name, Limiter: sp.r.Limiter, Key: sp.key, Limit: sp.limit, Spent: sp.cost})
			}
		}
		if items != nil {
			d.Tab = usage.NewTab(items)
		}
	}
	if tight >= 0 {
		if tight > 0 { // tightest first, the others in rule order
			first, from := cands[tight], origins[tight]
			copy(cands[1:tight+1], cands[:tight])
			copy(origins[1:tight+1], origins[:tight])
			cands[0], origins[0] = first, from
		}
		if !opts.AllPolicies {
			cands = cands[:1:1]
		}
		for i := range cands {
			if p := &cands[i]; p.Result.Remaining <= 0 { // RateLimit's r=0, after any refund
				o := &origins[i]
				o.r.untilMore(ctx, o.key, o.limit, p)
			}
		}
		d.Policies = cands
	}
	return d, nil
}

// gaveBack counts the give-back of what rule i spent for a rejected
// request: refunded (its Policy's Remaining counting the cost again) or
// unrefunded.
func (e *Engine[R]) gaveBack(ctx context.Context, spend []spent[R], cands []rules.Policy, i int, err error) {
	var sp *spent[R]
	for j := range spend {
		if spend[j].i == i {
			sp = &spend[j]
			break
		}
	}
	st := sp.r.st
	switch {
	case errors.Is(err, ErrNoRefund):
		st.count(rules.OutcomeUnrefunded)
		return
	case err != nil:
		st.errors[rules.Classify(err)].Add(1)
		st.count(rules.OutcomeUnrefunded)
		e.warn(ctx, "refund failed", "rule", sp.r.Name, "key", sp.key, "cost", sp.cost, "err", err)
		return
	}
	st.count(rules.OutcomeRefunded)
	if sp.cand >= 0 {
		r := &cands[sp.cand].Result
		r.Remaining = min(r.Remaining+sp.cost, sp.limit.Burst)
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

// warnMisconfigured logs, once per rule, at level Error, a request in
// which the rule found no key for want of what the front end should have
// given its key function: the rule limits nothing until its setup is
// fixed, so the line names the fix.
func (e *Engine[R]) warnMisconfigured(ctx context.Context, ru *rule[R], req R, fix string) {
	if ru.st.warnedMisconfigured.Load() || !ru.st.warnedMisconfigured.CompareAndSwap(false, true) {
		return
	}
	e.log.ErrorContext(ctx, "rule is misconfigured and limits nothing; logged once per rule, counted as outcome misconfigured",
		"rule", ru.Name, "request", e.describe(req), "fix", fix)
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

// fallbackDenial is what a rule reports of a denial by its limiter's
// fallback share (Source hybridlimit.SourceFallback, not FailedClosed):
// nothing left, and the share's wait as the wait and as the time until
// more quota (RateLimit's r=0 and t, Retry-After). The share's own
// Remaining and ResetAfter are not reported: they count a fraction of the
// limit, this instance's, which the client neither sees nor can use
// elsewhere. The quota and window reported are the rule's, which do not
// depend on Redis. A denial always names a wait, at least the rule's
// FailRetry: Redis may answer again by then.
func fallbackDenial[R any](res hybridlimit.Result, ru *rule[R]) hybridlimit.Result {
	wait := res.RetryAfter
	if wait <= 0 {
		wait = ru.failRetry()
	}
	return hybridlimit.Result{Limit: res.Limit, Source: res.Source, RetryAfter: wait, ResetAfter: wait}
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
func (e *Engine[R]) Stats() rules.Stats {
	s := e.set.Load()
	out := rules.Stats{
		Admitted:      e.fates[fateAdmitted].Load(),
		Limited:       e.fates[fateLimited].Load(),
		Unavailable:   e.fates[fateUnavailable].Load(),
		Canceled:      e.fates[fateCanceled].Load(),
		CheckDuration: e.duration.Snapshot(&checkDuration),
		Rules:         make([]rules.RuleStats, len(s.rules)),
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
