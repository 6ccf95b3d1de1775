package rls

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/hybridlimit/hybridlimit"
)

// fakeDecider keeps exact token counts per key (no refill) and, like a
// replica that has not seen another's spending, peeks every key as full.
type fakeDecider struct {
	left     map[string]int64
	refunds  map[string]int64
	spentAll int64
}

func (f *fakeDecider) AllowN(_ context.Context, key string, l hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	left, ok := f.left[key]
	if !ok {
		left = l.Burst
	}
	if cost > left {
		return hybridlimit.Result{Limit: l, Source: hybridlimit.SourceGlobal, RetryAfter: time.Second}, nil
	}
	f.left[key] = left - cost
	f.spentAll += cost
	return hybridlimit.Result{Limit: l, Allowed: true, Source: hybridlimit.SourceLocal, Remaining: left - cost}, nil
}

func (f *fakeDecider) Peek(_ context.Context, _ string, l hybridlimit.Limit) (hybridlimit.Result, error) {
	return hybridlimit.Result{Limit: l, Allowed: true, Remaining: l.Burst}, nil
}

// refundingDecider is a fakeDecider with the Refund method the limiters
// are getting.
type refundingDecider struct{ *fakeDecider }

func (f refundingDecider) Refund(_ context.Context, key string, _ hybridlimit.Limit, cost int64) error {
	f.left[key] += cost
	f.refunds[key] += cost
	return nil
}

// fakeService is a Service on a fakeDecider, with Refund or without, over
// the rules in yaml; left seeds the tokens of some keys.
func fakeService(t *testing.T, yaml string, left map[string]int64, refunds bool) (*Service, *fakeDecider, *hybridBackend) {
	t.Helper()
	cfg, err := LoadConfig([]File{{"d.yaml", []byte(yaml)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeDecider{left: left, refunds: map[string]int64{}}
	var d Decider = fake
	if refunds {
		d = refundingDecider{fake}
	}
	h := &hybridBackend{main: d, maxWait: 10 * time.Millisecond, nearRatio: 0.5, fallbacks: new(atomic.Uint64)}
	svc := &Service{backend: h, rules: newStatSet(100), log: slog.New(slog.DiscardHandler), opt: serviceOptions{maxWait: 10 * time.Millisecond, nearRatio: 0.5}}
	svc.SetConfig(cfg)
	return svc, fake, h
}

// TestRefundAcrossDescriptors: when a descriptor decided first admits and
// a later one denies the request (the replica's view said both had room),
// the first one's tokens are given back (b, with more room by its peek,
// is decided after a) if the limiter can refund, and
// stay spent if it cannot.
func TestRefundAcrossDescriptors(t *testing.T) {
	const rules = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 100}
`
	for _, refunds := range []bool{true, false} {
		svc, fake, h := fakeService(t, rules, map[string]int64{"d|b=x": 0}, refunds)
		r, err := svc.ShouldRateLimit(context.Background(), request2("d", [][2]string{{"a", "x"}}, [][2]string{{"b", "x"}}))
		if err != nil {
			t.Fatal(err)
		}
		if r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || r.Statuses[1].Code != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("refunds=%v: %v, want b over", refunds, r)
		}
		wantLeft, wantRemaining := int64(9), uint32(9)
		if refunds {
			wantLeft, wantRemaining = 10, 10
		}
		if got := fake.left["d|a=x"]; got != wantLeft || r.Statuses[0].LimitRemaining != wantRemaining {
			t.Fatalf("refunds=%v: a holds %d, reports %d remaining; want %d, %d", refunds, got, r.Statuses[0].LimitRemaining, wantLeft, wantRemaining)
		}
		if st := svc.Stats(); refunds && st.Refunded != 1 || !refunds && st.Refunded != 0 {
			t.Fatalf("refunds=%v: Refunded = %d", refunds, st.Refunded)
		}
		if err := h.canRefund(); (err == nil) != refunds {
			t.Fatalf("refunds=%v: canRefund = %v", refunds, err)
		}
	}
}

// TestBadHits: a hits_addend past 2^53 is refused; one past the limit is
// over it without asking the store.
func TestBadHits(t *testing.T) {
	svc, fake, _ := fakeService(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 10}\n", map[string]int64{}, false)
	req := request2("d", [][2]string{{"a", "x"}})
	req.HitsAddend = 11
	if r, err := svc.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || fake.spentAll != 0 {
		t.Fatalf("hits 11 on 10 an hour: %v %v, spent %d", r, err, fake.spentAll)
	}
	req = request2("d", [][2]string{{"a", "x"}})
	req.Descriptors[0].HitsAddend = wrapUint64(1 << 60)
	if _, err := svc.ShouldRateLimit(context.Background(), req); err == nil {
		t.Fatal("hits 2^60 accepted")
	}
}

// TestNegativeHits: is_negative_hits gives hits back through Refund, and
// is refused by a limiter without it.
func TestNegativeHits(t *testing.T) {
	for _, refunds := range []bool{true, false} {
		svc, fake, _ := fakeService(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 10}\n", map[string]int64{"d|a=x": 4}, refunds)
		req := request2("d", [][2]string{{"a", "x"}})
		req.HitsAddend = 3
		req.Descriptors[0].IsNegativeHits = true
		r, err := svc.ShouldRateLimit(context.Background(), req)
		switch {
		case refunds && (err != nil || r.OverallCode != rlspb.RateLimitResponse_OK || fake.left["d|a=x"] != 7):
			t.Fatalf("negative hits: %v %v, holds %d, want 7", r, err, fake.left["d|a=x"])
		case !refunds && err == nil:
			t.Fatalf("negative hits without Refund: %v", r)
		}
	}
}
