package rls

import (
	"context"
	"log/slog"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
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

func (f *fakeDecider) Charge(_ context.Context, key string, l hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	left, ok := f.left[key]
	if !ok {
		left = l.Burst
	}
	f.left[key] = left - cost
	f.spentAll += cost
	return hybridlimit.Result{Limit: l, Allowed: true, Source: hybridlimit.SourceGlobal, RetryAfter: time.Second}, nil
}

func (f *fakeDecider) Refund(_ context.Context, key string, _ hybridlimit.Limit, cost int64) error {
	f.left[key] += cost
	f.refunds[key] += cost
	return nil
}

// newTestService is a Service over the rules in yaml on the limiter d.
func newTestService(t *testing.T, yaml string, d decider, policy hybridlimit.FailurePolicy) *Service {
	t.Helper()
	cfg, err := LoadConfig([]File{{"d.yaml", []byte(yaml)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	svc := &Service{rules: newStatSet(100), log: slog.New(slog.DiscardHandler), opt: serviceOptions{nearRatio: 0.5}}
	svc.backend = &hybridBackend{main: d, policy: policy, nearRatio: 0.5, fallbacks: &svc.c.failurePolicy}
	svc.SetConfig(cfg)
	return svc
}

// fakeService is a Service on a fakeDecider over the rules in yaml; left
// seeds the tokens of some keys.
func fakeService(t *testing.T, yaml string, left map[string]int64) (*Service, *fakeDecider) {
	t.Helper()
	fake := &fakeDecider{left: left, refunds: map[string]int64{}}
	return newTestService(t, yaml, fake, hybridlimit.FallbackLocal), fake
}

const twoRules = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// TestRefundAcrossDescriptors: when a descriptor decided first admits and
// a later one denies the request (the replica's view said both had room),
// the first one's tokens are given back (b, with more room by its peek,
// is decided after a).
func TestRefundAcrossDescriptors(t *testing.T) {
	svc, fake := fakeService(t, twoRules, map[string]int64{"d|b=x": 0})
	r, err := svc.ShouldRateLimit(context.Background(), request2("d", [][2]string{{"a", "x"}}, [][2]string{{"b", "x"}}))
	if err != nil {
		t.Fatal(err)
	}
	if r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || r.Statuses[1].Code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("%v, want b over", r)
	}
	if got := fake.left["d|a=x"]; got != 10 || r.Statuses[0].LimitRemaining != 10 {
		t.Fatalf("a holds %d, reports %d remaining; want 10, 10", got, r.Statuses[0].LimitRemaining)
	}
	if st := svc.Stats(); st.Refunded != 1 {
		t.Fatalf("Refunded = %d, want 1", st.Refunded)
	}
}

// TestBadHits: a hits_addend past 2^53 is refused; one past the limit is
// over it without asking the store.
func TestBadHits(t *testing.T) {
	svc, fake := fakeService(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 10}\n", map[string]int64{})
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

// TestNegativeHits: is_negative_hits gives hits back through Refund.
func TestNegativeHits(t *testing.T) {
	svc, fake := fakeService(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 10}\n", map[string]int64{"d|a=x": 4})
	req := request2("d", [][2]string{{"a", "x"}})
	req.HitsAddend = 3
	req.Descriptors[0].IsNegativeHits = true
	r, err := svc.ShouldRateLimit(context.Background(), req)
	if err != nil || r.OverallCode != rlspb.RateLimitResponse_OK || fake.left["d|a=x"] != 7 {
		t.Fatalf("negative hits: %v %v, holds %d, want 7", r, err, fake.left["d|a=x"])
	}
}

// fixedDecider answers every decision with one Result, as a limiter
// whose failure policy decides (Source SourceFallback) or Redis does.
type fixedDecider struct {
	fakeDecider
	res hybridlimit.Result
}

func (f *fixedDecider) AllowN(_ context.Context, _ string, l hybridlimit.Limit, _ int64) (hybridlimit.Result, error) {
	r := f.res
	r.Limit = l
	return r, nil
}

// TestFailurePolicyAnswers: a decision of the limiter's failure policy is
// the answer under every policy but error, which answers its denials
// UNAVAILABLE; a denial Redis made is OVER_LIMIT under every policy. Each
// decision of the policy is counted.
func TestFailurePolicyAnswers(t *testing.T) {
	fallbackDeny := hybridlimit.Result{Source: hybridlimit.SourceFallback, RetryAfter: time.Second}
	fallbackAdmit := hybridlimit.Result{Source: hybridlimit.SourceFallback, Allowed: true, Remaining: 3}
	redisDeny := hybridlimit.Result{Source: hybridlimit.SourceGlobal, RetryAfter: time.Second}
	tests := []struct {
		policy   hybridlimit.FailurePolicy
		res      hybridlimit.Result
		want     rlspb.RateLimitResponse_Code // UNKNOWN: UNAVAILABLE
		fallback uint64
	}{
		{hybridlimit.FallbackLocal, fallbackAdmit, rlspb.RateLimitResponse_OK, 1},
		{hybridlimit.FallbackLocal, fallbackDeny, rlspb.RateLimitResponse_OVER_LIMIT, 1},
		{hybridlimit.FailOpen, fallbackAdmit, rlspb.RateLimitResponse_OK, 1},
		{hybridlimit.FailClosed, fallbackDeny, rlspb.RateLimitResponse_OVER_LIMIT, 1},
		{hybridlimit.FailError, fallbackDeny, rlspb.RateLimitResponse_UNKNOWN, 1},
		{hybridlimit.FailError, redisDeny, rlspb.RateLimitResponse_OVER_LIMIT, 0},
		{hybridlimit.FallbackLocal, redisDeny, rlspb.RateLimitResponse_OVER_LIMIT, 0},
	}
	for _, tt := range tests {
		d := &fixedDecider{fakeDecider: fakeDecider{left: map[string]int64{}, refunds: map[string]int64{}}, res: tt.res}
		svc := newTestService(t, twoRules, d, tt.policy)
		r, err := svc.ShouldRateLimit(context.Background(), request2("d", [][2]string{{"a", "x"}}))
		switch {
		case tt.want == rlspb.RateLimitResponse_UNKNOWN && status.Code(err) != codes.Unavailable:
			t.Errorf("%v, %+v: %v %v, want UNAVAILABLE", tt.policy, tt.res, r, err)
		case tt.want != rlspb.RateLimitResponse_UNKNOWN && (err != nil || r.OverallCode != tt.want):
			t.Errorf("%v, %+v: %v %v, want %v", tt.policy, tt.res, r, err, tt.want)
		}
		if got := svc.Stats().FailurePolicy; got != tt.fallback {
			t.Errorf("%v, %+v: FailurePolicy = %d, want %d", tt.policy, tt.res, got, tt.fallback)
		}
	}
}

// replica is one replica of the service on a real limiter.
type replica struct {
	svc *Service
	lim *hlsync.Limiter
}

// newReplica is a replica on a hybrid limiter of its own over rdb, the
// rules in yaml, keys under prefix: a replica of the service as NewServer
// builds it. The limiter is closed when the test ends, if not before.
func newReplica(t *testing.T, rdb *redistest.Server, prefix, yaml string, policy hybridlimit.FailurePolicy) *replica {
	t.Helper()
	lim, err := hlsync.New(rdb.Client(t), hlsync.WithPrefix(prefix), hlsync.WithFailurePolicy(limiterPolicy(policy)),
		hlsync.WithMaxWait(2*time.Second)) // Redis's answers are the claim, not a fetch slow under -race
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close(context.Background()) })
	return &replica{svc: newTestService(t, yaml, lim, policy), lim: lim}
}

func (r *replica) call(t *testing.T, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.svc.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// hits is a request of one descriptor d=x with the given hits_addend.
func hits(d string, n uint64, negative bool) *rlspb.RateLimitRequest {
	req := request2("d", [][2]string{{d, "x"}})
	req.Descriptors[0].HitsAddend = wrapUint64(n)
	req.Descriptors[0].IsNegativeHits = negative
	return req
}

// TestRefundsReachRedis: with the hybrid limiter on a real Redis, what a
// denied request's other descriptor spent, and what is_negative_hits gives
// back, returns to the bucket in Redis: once the replica that took it hands
// its allowance back (at Close here, at a later round in service), another
// replica can spend it.
func TestRefundsReachRedis(t *testing.T) {
	rdb := redistest.Start(t)
	code := func(r *rlspb.RateLimitResponse) rlspb.RateLimitResponse_Code { return r.OverallCode }
	const ok, over = rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT

	t.Run("denied request", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		a, b := newReplica(t, rdb, prefix, twoRules, hybridlimit.FallbackLocal), newReplica(t, rdb, prefix, twoRules, hybridlimit.FallbackLocal)
		if r := b.call(t, hits("b", 100, false)); code(r) != ok {
			t.Fatalf("replica b spending b's whole bucket: %v", r)
		}
		// Replica a has not seen b spent: it decides a first (less room by
		// its view), then Redis denies b.
		r := a.call(t, request2("d", [][2]string{{"a", "x"}}, [][2]string{{"b", "x"}}))
		if code(r) != over || r.Statuses[0].Code != ok || r.Statuses[1].Code != over || r.Statuses[0].LimitRemaining != 10 {
			t.Fatalf("a and b on replica a: %v, want b over, a refunded to 10", r)
		}
		if got := a.lim.Stats().Refunded; got != 1 {
			t.Fatalf("the limiter refunded %d, want 1", got)
		}
		if err := a.lim.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := b.call(t, hits("a", 10, false)); code(r) != ok {
			t.Fatalf("replica b spending a's whole bucket after replica a refunded it: %v", r)
		}
	})

	t.Run("is_negative_hits", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		a, b := newReplica(t, rdb, prefix, twoRules, hybridlimit.FallbackLocal), newReplica(t, rdb, prefix, twoRules, hybridlimit.FallbackLocal)
		if r := a.call(t, hits("a", 5, false)); code(r) != ok || r.Statuses[0].LimitRemaining != 5 {
			t.Fatalf("5 of 10: %v", r)
		}
		if r := a.call(t, hits("a", 3, true)); code(r) != ok || r.Statuses[0].LimitRemaining != 8 {
			t.Fatalf("3 given back: %v, want remaining 8", r)
		}
		// A replica gives back at most what it admitted for the key.
		if r := b.call(t, hits("a", 4, true)); code(r) != ok {
			t.Fatalf("4 given back where none was taken: %v", r)
		}
		if err := a.lim.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := b.call(t, hits("a", 8, false)); code(r) != ok || r.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("replica b spending the 8 left: %v", r)
		}
		if r := b.call(t, hits("a", 1, false)); code(r) != over {
			t.Fatalf("replica b spending one more: %v", r)
		}
	})
}

// countEveryHit makes r count every hit (Settings.CountEveryHit).
func (r *replica) countEveryHit() *replica {
	r.svc.opt.countAll = true
	r.svc.backend.(*hybridBackend).charge = true
	return r
}

// TestCountEveryHit: two replicas on a real Redis, 10 an hour. A request
// of 4 hits is admitted; a check without hits is OK; then 9 hits, more
// than the 6 left. Sent as a cost (the descriptor's hits_addend, as Envoy
// sends usage when a stream ends), or with every hit counted, they are
// charged anyway: a check is over the limit while the bucket is in debt,
// and a hit on the other replica is too, charged as well, until the 4 of
// debt and a token have refilled, 30 minutes. Sent as a request's plain
// hits, by default nothing over the limit counts: the check is OK, and the
// next token is at most 6 minutes away. Counting every hit, a request's
// other descriptor spends though the first is over its limit.
func TestCountEveryHit(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	for _, c := range []struct {
		name           string
		cost, countAll bool
	}{
		{"plain", false, false}, {"cost", true, false}, {"plain/count_every_hit", false, true},
	} {
		prefix := redistest.Prefix(t) + c.name + ":"
		a, b := newReplica(t, srv, prefix, twoRules, hybridlimit.FallbackLocal), newReplica(t, srv, prefix, twoRules, hybridlimit.FallbackLocal)
		if c.countAll {
			a.countEveryHit()
			b.countEveryHit()
		}
		send := func(r *replica, n uint64) *rlspb.RateLimitResponse {
			if c.cost {
				return r.call(t, hits("a", n, false))
			}
			req := request2("d", [][2]string{{"a", "x"}})
			req.HitsAddend = uint32(n)
			return r.call(t, req)
		}
		check := func() rlspb.RateLimitResponse_Code { return a.call(t, hits("a", 0, false)).OverallCode }
		if r := send(a, 4); r.OverallCode != rlspb.RateLimitResponse_OK {
			t.Fatalf("%s: 4 hits of 10: %v", c.name, r)
		}
		if code := check(); code != rlspb.RateLimitResponse_OK {
			t.Fatalf("%s: a check after 4 of 10: %v", c.name, code)
		}
		if r := send(a, 9); r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%s: 9 hits with 6 left: %v, want OVER_LIMIT", c.name, r)
		}
		counted := c.cost || c.countAll
		want := rlspb.RateLimitResponse_OK
		if counted {
			want = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if code := check(); code != want {
			t.Errorf("%s: a check after 4 and 9 of 10: %v, want %v", c.name, code, want)
		}
		// The other replica asks Redis for a hit (10 an hour is a low
		// limit, asked of Redis per request).
		r := send(b, 1)
		wait := r.Statuses[0].GetDurationUntilReset().AsDuration()
		switch {
		case r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT:
			t.Errorf("%s: a hit after 4 of 10 and 9 with 6 left: %v, want OVER_LIMIT", c.name, r)
		case counted && wait < 29*time.Minute:
			t.Errorf("%s: a hit after 4 and 9 of 10 counted: %v, want OVER_LIMIT for 30 minutes", c.name, r)
		case !counted && wait > 6*time.Minute:
			t.Errorf("%s: a hit after 4 of 10 and 9 refused: %v, want no wait past 6 minutes", c.name, r)
		}
		// Both descriptors, a over its limit: b spends only when every
		// hit counts. (10 and 100 an hour are low limits, asked of Redis
		// per request: what a replica reports is exact.)
		req := request2("d", [][2]string{{"a", "x"}}, [][2]string{{"b", "x"}})
		req.HitsAddend = 20
		a.call(t, req)
		left := uint32(99)
		if c.countAll {
			left = 79
		}
		if r := a.call(t, hits("b", 1, false)); r.Statuses[0].LimitRemaining != left {
			t.Errorf("%s: b holds %d after a request a denied and one hit, want %d", c.name, r.Statuses[0].LimitRemaining, left)
		}
	}
}
