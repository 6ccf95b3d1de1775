package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/httplimit/internal/sfv"
	"github.com/hybridlimit/hybridlimit/internal/fakelimiter"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type fakeLimiter = fakelimiter.Limiter

var (
	answer   = fakelimiter.Answer
	allowed  = fakelimiter.Allowed
	newLocal = fakelimiter.NewLocal
)

// refunder is a fakeLimiter that also takes refunds, and counts them.
type refunder struct {
	*fakeLimiter
	refunds []string
}

func (l *refunder) Refund(_ context.Context, key string, _ hybridlimit.Limit, _ int64) error {
	l.refunds = append(l.refunds, key)
	return nil
}

// refunding returns a refunder that always answers r.
func refunding(r hybridlimit.Result) *refunder { return &refunder{fakeLimiter: answer(r, nil)} }

func denied(retry, reset time.Duration) hybridlimit.Result {
	return hybridlimit.Result{RetryAfter: retry, ResetAfter: reset}
}

// fallbackDenied is a hybrid limiter's denial by its fallback share
// (hybridlimit.FallbackLocal), made because Redis could not be asked: the share's
// figures, a fraction of the limit's.
func fallbackDenied(retry time.Duration) hybridlimit.Result {
	return hybridlimit.Result{Source: hybridlimit.SourceFallback, Remaining: 1, RetryAfter: retry, ResetAfter: 9 * retry}
}

// failedClosed is a hybrid limiter's denial by its FailClosed policy, made
// because Redis could not be asked.
func failedClosed(retry time.Duration) hybridlimit.Result {
	return hybridlimit.Result{Source: hybridlimit.SourceFallback, FailedClosed: true, RetryAfter: retry, ResetAfter: time.Minute}
}

// policyItem is one member of RateLimit-Policy or RateLimit, parsed.
type policyItem struct {
	Name string
	// Params holds the integer parameters (q, w, r, t); Unit the qu string.
	Params map[string]int64
	Unit   string
}

func (p policyItem) String() string { return fmt.Sprintf("%q%v", p.Name, p.Params) }

// parseField parses a RateLimit-Policy or RateLimit field value with a
// Structured Field parser and checks its shape: a List of Items, each a
// String with integer parameters (and a String qu), none negative, and the
// required parameter present.
func parseField(tb testing.TB, name, value string) []policyItem {
	tb.Helper()
	members, err := sfv.ParseList(value)
	if err != nil {
		tb.Fatalf("%s: %q is not a Structured Field List: %v", name, value, err)
	}
	required := map[string]string{HeaderRateLimitPolicy: "q", HeaderRateLimit: "r"}[name]
	var out []policyItem
	for _, m := range members {
		it, ok := m.(sfv.Item)
		if !ok {
			tb.Fatalf("%s: member %#v is not an Item", name, m)
		}
		s, ok := it.Value.(string)
		if !ok {
			tb.Fatalf("%s: policy name %#v is not a String", name, it.Value)
		}
		pi := policyItem{Name: s, Params: map[string]int64{}}
		for _, p := range it.Params {
			switch v := p.Value.(type) {
			case int64:
				if v < 0 {
					tb.Fatalf("%s: %s=%d is negative", name, p.Key, v)
				}
				pi.Params[p.Key] = v
			case string:
				if p.Key != "qu" {
					tb.Fatalf("%s: parameter %s is a String", name, p.Key)
				}
				pi.Unit = v
			default:
				tb.Fatalf("%s: parameter %s=%#v is not an Integer", name, p.Key, p.Value)
			}
		}
		if _, ok := pi.Params[required]; !ok {
			tb.Fatalf("%s: %q lacks the required parameter %s", name, value, required)
		}
		out = append(out, pi)
	}
	return out
}

// fields parses both RateLimit fields of h; nil when absent.
func fields(tb testing.TB, h http.Header) (policy, state []policyItem) {
	tb.Helper()
	if v := h.Values(HeaderRateLimitPolicy); len(v) > 0 {
		if len(v) > 1 {
			tb.Fatalf("%d %s lines", len(v), HeaderRateLimitPolicy)
		}
		policy = parseField(tb, HeaderRateLimitPolicy, v[0])
	}
	if v := h.Values(HeaderRateLimit); len(v) > 0 {
		state = parseField(tb, HeaderRateLimit, v[0])
	}
	if len(policy) != len(state) {
		tb.Fatalf("%d policies but %d states: %v / %v", len(policy), len(state), policy, state)
	}
	for i := range policy {
		if policy[i].Name != state[i].Name {
			tb.Fatalf("policy %d is %q in %s but %q in %s", i, policy[i].Name, HeaderRateLimitPolicy, state[i].Name, HeaderRateLimit)
		}
	}
	return policy, state
}
