package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

// serve starts a real gRPC server on loopback with the health service
// behind ic's interceptors, and returns a client connected to it; both
// stop when the test ends.
func serve(t *testing.T, ic *grpclimit.Interceptor) healthpb.HealthClient {
	t.Helper()
	return serveWith(t, grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream()))
}

// serveWith is serve with the server's options given whole.
func serveWith(t *testing.T, opts ...grpc.ServerOption) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		hs.Shutdown()
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return healthpb.NewHealthClient(conn)
}

func newLocal(t *testing.T) *rules.Local {
	t.Helper()
	tbl, err := local.NewTable()
	if err != nil {
		t.Fatal(err)
	}
	l, err := rules.NewLocal(tbl)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// details returns the RetryInfo delay and the QuotaFailure subjects of a
// status error.
func details(t *testing.T, err error) (retry time.Duration, subjects []string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("%v is not a status error", err)
	}
	retry = -1
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.RetryInfo:
			retry = x.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			for _, v := range x.GetViolations() {
				subjects = append(subjects, v.GetSubject())
			}
		}
	}
	return retry, subjects
}

// TestUnaryPerPeer limits health checks to two a minute per peer address
// on a real server and client: the third call is ResourceExhausted with a
// RetryInfo of the time to the next token and a QuotaFailure naming the
// policy, and every response carries the RateLimit fields as metadata.
func TestUnaryPerPeer(t *testing.T) {
	redistest.NoLeaks(t)
	ic, err := grpclimit.New([]grpclimit.Rule{{Name: "per-peer", Limiter: newLocal(t), Limit: hybridlimit.PerMinute(2), Key: grpclimit.PeerIP()}})
	if err != nil {
		t.Fatal(err)
	}
	client := serve(t, ic)
	ctx := t.Context()
	for i, want := range []string{`"per-peer";r=1;t=30`, `"per-peer";r=0;t=30`} {
		var hdr metadata.MD
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := hdr.Get("ratelimit"); len(got) != 1 || got[0] != want {
			t.Errorf("call %d: ratelimit metadata %q, want %q", i, got, want)
		}
		if got := hdr.Get("ratelimit-policy"); len(got) != 1 || got[0] != `"per-peer";q=2;w=60` {
			t.Errorf("call %d: ratelimit-policy metadata %q", i, got)
		}
	}
	var hdr metadata.MD
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	retry, subjects := details(t, err)
	if retry <= 29*time.Second || retry > 30*time.Second || len(subjects) != 1 || subjects[0] != "per-peer" {
		t.Errorf("third call: RetryInfo %v, QuotaFailure %q; want about 30s and per-peer", retry, subjects)
	}
	if got := hdr.Get("ratelimit"); len(got) != 1 || got[0] != `"per-peer";r=0;t=30` {
		t.Errorf("third call: ratelimit metadata %q", got)
	}
	s := ic.Stats()
	if s.Admitted != 2 || s.Limited != 1 || s.CheckDuration.Count != 3 {
		t.Errorf("Stats: %+v", s)
	}
}

// TestStreamChecked: a stream is one call, checked when it opens.
func TestStreamChecked(t *testing.T) {
	redistest.NoLeaks(t)
	ic, err := grpclimit.New([]grpclimit.Rule{{Name: "watches", Limiter: newLocal(t), Limit: hybridlimit.PerHour(1),
		Key: grpclimit.Method(), Match: grpclimit.Streams()}})
	if err != nil {
		t.Fatal(err)
	}
	client := serve(t, ic)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := first.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first stream: %v, %v", r, err)
	}
	second, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second stream: %v, want ResourceExhausted", err)
	}
	// Unary calls do not match the rule.
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("unary call: %v", err)
	}
	cancel()
}

// TestMetadataKeyAndRefund keys an exact rule on a real Redis by an API
// key in the metadata, after a per-method rule: calls the per-key rule
// denies cost the per-method rule nothing, and a method the per-key rule
// exempts is not asked of it.
func TestMetadataKeyAndRefund(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	exact, err := global.New(rdb, global.GCRA, global.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	loc := newLocal(t)
	ic, err := grpclimit.New([]grpclimit.Rule{
		{Name: "per-method", Limiter: loc, Limit: hybridlimit.PerHour(10), Key: grpclimit.Method()},
		{Name: "per-key", Limiter: exact, Limit: hybridlimit.PerHour(2), Key: grpclimit.MetadataDigest("x-api-key"),
			Exempt: grpclimit.Methods("/grpc.health.v1.Health/List")},
	}, grpclimit.WithAllPolicies())
	if err != nil {
		t.Fatal(err)
	}
	client := serve(t, ic)
	call := func(key string) error {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	var codesSeen []codes.Code
	for range 6 {
		codesSeen = append(codesSeen, status.Code(call("secret")))
	}
	want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.ResourceExhausted, codes.ResourceExhausted, codes.ResourceExhausted}
	for i := range want {
		if codesSeen[i] != want[i] {
			t.Fatalf("calls with one key: %v, want %v", codesSeen, want)
		}
	}
	// The four denied calls were given back to per-method: 8 of 10 left.
	var hdr metadata.MD
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "other")
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if got := hdr.Get("ratelimit"); len(got) != 1 || !strings.Contains(got[0], `"per-method";r=7`) {
		t.Errorf("per-method after 2 admitted, 4 denied and refunded, 1 more: %q, want r=7", got)
	}
	if o := ic.Stats().Rules[0].Outcomes; o[rules.OutcomeRefunded] != 4 {
		t.Errorf("per-method outcomes %v, want 4 refunded", o)
	}
	// The secret never reaches Redis key names.
	if keys, _ := rdb.Keys(t.Context(), "*secret*").Result(); len(keys) > 0 {
		t.Errorf("the API key is in Redis key names: %q", keys)
	}
	if err := ic.ResetCall(t.Context(), "per-key", &grpclimit.Call{Ctx: metadata.NewIncomingContext(t.Context(), metadata.Pairs("x-api-key", "secret"))}); err != nil {
		t.Fatal(err)
	}
	if err := call("secret"); err != nil {
		t.Errorf("after ResetCall: %v", err)
	}
}

// TestUnavailable: a FailClosed rule whose Redis refuses connections
// answers Unavailable with a RetryInfo of its FailRetry; a FailOpen one
// lets the call through.
func TestUnavailable(t *testing.T) {
	redistest.NoLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	down, err := global.New(rdb, global.GCRA)
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []hybridlimit.FailurePolicy{hybridlimit.FailOpen, hybridlimit.FailClosed} {
		ic, err := grpclimit.New([]grpclimit.Rule{{Name: "exact", Limiter: down, Limit: hybridlimit.PerMinute(10),
			Key: grpclimit.Static("k"), OnError: policy, FailRetry: 3 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		client := serve(t, ic)
		_, err = client.Check(t.Context(), &healthpb.HealthCheckRequest{})
		if policy == hybridlimit.FailOpen {
			if err != nil {
				t.Errorf("fail open: %v", err)
			}
			continue
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("fail closed: %v, want Unavailable", err)
		}
		if retry, _ := details(t, err); retry != 3*time.Second {
			t.Errorf("fail closed: RetryInfo %v, want 3s", retry)
		}
	}
}

// answering is a Limiter that always answers its Result.
type answering hybridlimit.Result

func (a answering) AllowN(_ context.Context, _ string, limit hybridlimit.Limit, _ int64) (hybridlimit.Result, error) {
	r := hybridlimit.Result(a)
	r.Limit = limit
	return r, nil
}

// TestFailurePolicyDenials: a hybrid limiter's fallback share denying
// (Redis out of reach, the share exhausted) is over a limit:
// ResourceExhausted with a RetryInfo of its wait, a QuotaFailure naming
// the policy and r=0 with t in the metadata. It was Unavailable. Its
// FailClosed policy denying (Result.FailedClosed) is Unavailable.
func TestFailurePolicyDenials(t *testing.T) {
	redistest.NoLeaks(t)
	for _, tt := range []struct {
		name  string
		res   hybridlimit.Result
		code  codes.Code
		state string
	}{
		{"fallback share", hybridlimit.Result{Source: hybridlimit.SourceFallback, Remaining: 1, RetryAfter: 2 * time.Second},
			codes.ResourceExhausted, `"per-peer";r=0;t=2`},
		{"fail closed", hybridlimit.Result{Source: hybridlimit.SourceFallback, FailedClosed: true, RetryAfter: 2 * time.Second},
			codes.Unavailable, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ic, err := grpclimit.New([]grpclimit.Rule{{Name: "per-peer", Limiter: answering(tt.res), Limit: hybridlimit.PerMinute(10), Key: grpclimit.PeerIP()}})
			if err != nil {
				t.Fatal(err)
			}
			var hdr metadata.MD
			_, err = serve(t, ic).Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
			if status.Code(err) != tt.code {
				t.Fatalf("call: %v, want %v", err, tt.code)
			}
			retry, subjects := details(t, err)
			if retry != 2*time.Second {
				t.Errorf("RetryInfo %v, want 2s", retry)
			}
			if tt.code == codes.ResourceExhausted && (len(subjects) != 1 || subjects[0] != "per-peer") {
				t.Errorf("QuotaFailure %q, want per-peer", subjects)
			}
			if got := strings.Join(hdr.Get("ratelimit"), ","); got != tt.state {
				t.Errorf("ratelimit metadata %q, want %q", got, tt.state)
			}
		})
	}
}

// TestHooks: OnLimited chooses the status a denied call gets.
func TestHooks(t *testing.T) {
	redistest.NoLeaks(t)
	var limited []string
	ic, err := grpclimit.New([]grpclimit.Rule{{Name: "one", Limiter: newLocal(t), Limit: hybridlimit.PerHour(1), Key: grpclimit.Service()}},
		grpclimit.WithOnLimited(func(c *grpclimit.Call, d *grpclimit.Decision) error {
			limited = append(limited, c.FullMethod)
			return status.Error(codes.PermissionDenied, "plan exhausted")
		}), grpclimit.WithHeaders(false))
	if err != nil {
		t.Fatal(err)
	}
	client := serve(t, ic)
	for range 2 {
		var hdr metadata.MD
		_, err = client.Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		if len(hdr.Get("ratelimit")) > 0 {
			t.Errorf("ratelimit metadata under WithHeaders(false): %v", hdr)
		}
	}
	if status.Code(err) != codes.PermissionDenied || len(limited) != 1 || limited[0] != checkMethod {
		t.Errorf("second call: %v, hook saw %q", err, limited)
	}
}

// TestNewRejects refuses rules that could not limit: typed-nil and zero
// limiters, and invalid fields, with the rule and field named.
func TestNewRejects(t *testing.T) {
	for _, tt := range []struct {
		r    grpclimit.Rule
		want string
	}{
		{grpclimit.Rule{Name: "a", Limiter: (*hlsync.Limiter)(nil), Limit: hybridlimit.PerSecond(1), Key: grpclimit.Method()}, "Limiter: a nil *sync.Limiter"},
		{grpclimit.Rule{Name: "a", Limiter: new(global.Limiter), Limit: hybridlimit.PerSecond(1), Key: grpclimit.Method()}, "not made by its constructor"},
		{grpclimit.Rule{Name: "a", Limiter: newLocal(t), Key: grpclimit.Method()}, "Limit:"},
		{grpclimit.Rule{Name: "a", Limiter: newLocal(t), Limit: hybridlimit.PerSecond(1)}, "Key: nil"},
		{grpclimit.Rule{Name: "", Limiter: newLocal(t), Limit: hybridlimit.PerSecond(1), Key: grpclimit.Method()}, "Name: empty"},
	} {
		if _, err := grpclimit.New([]grpclimit.Rule{tt.r}); !errors.Is(err, rules.ErrInvalidRule) || !strings.Contains(err.Error(), tt.want) ||
			!strings.HasPrefix(err.Error(), "grpclimit: ") {
			t.Errorf("New(%+v) = %v, want one naming %q", tt.r, err, tt.want)
		}
	}
	if _, err := rules.NewLocal(new(local.Table)); err == nil {
		t.Error("NewLocal of a zero table succeeded")
	}
}

// TestKeys checks the key functions and matchers on made-up calls.
func TestKeys(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "acme", "authorization", "Bearer tok"))
	c := &grpclimit.Call{Ctx: ctx, FullMethod: "/shop.Orders/Create"}
	for _, tt := range []struct {
		name string
		k    grpclimit.KeyFunc
		want string
		ok   bool
	}{
		{"method", grpclimit.Method(), "/shop.Orders/Create", true},
		{"service", grpclimit.Service(), "/shop.Orders", true},
		{"metadata", grpclimit.Metadata("X-Tenant"), "acme", true},
		{"missing metadata", grpclimit.Metadata("x-none"), "", false},
		{"bearer digest", grpclimit.MetadataDigest("authorization"), "", true},
		{"join", rules.Join(grpclimit.Metadata("x-tenant"), grpclimit.Static("a|b")), `acme|a\|b`, true},
		{"no peer", grpclimit.PeerIP(), "", false},
	} {
		got, ok := tt.k(c)
		if ok != tt.ok || tt.want != "" && got != tt.want {
			t.Errorf("%s: %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	if d1, _ := grpclimit.MetadataDigest("authorization")(c); len(d1) != 32 || strings.Contains(d1, "tok") {
		t.Errorf("digest %q", d1)
	}
	m := grpclimit.Methods("/shop.Orders/*", "/grpc.health.v1.Health/Check")
	for method, want := range map[string]bool{"/shop.Orders/Create": true, "/shop.Ordersx/A": false, checkMethod: true, watchMethod: false} {
		if got := m(&grpclimit.Call{FullMethod: method}); got != want {
			t.Errorf("Methods(%s) = %v", method, got)
		}
	}
}

// TestNilCall: Check of a nil call or context is an error, not a panic.
func TestNilCall(t *testing.T) {
	ic, err := grpclimit.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*grpclimit.Call{nil, {FullMethod: checkMethod}} {
		if _, err := ic.Check(c); err == nil {
			t.Errorf("Check(%+v) succeeded", c)
		}
	}
}

// TestSettle runs a token quota over a real gRPC server: each call spends
// an estimate of 100 and its handler (here an interceptor in front of the
// service) reports 400 used. Unary calls: three use 1,200 of 1,000, the
// rest charged whatever the key holds, so the fourth is denied. A stream
// reports in its context too, settled when the handler returns.
func TestSettle(t *testing.T) {
	redistest.NoLeaks(t)
	limit := hybridlimit.Limit{Rate: 1000, Period: 24 * time.Hour, Burst: 1000}
	loc := newLocal(t)
	ic, err := grpclimit.New([]grpclimit.Rule{{Name: "tokens", Limiter: loc, Limit: limit,
		Key: grpclimit.Static("k"), Cost: 100, Settle: true}})
	if err != nil {
		t.Fatal(err)
	}
	report := func(ctx context.Context) {
		if err := rules.ReportCost(ctx, "tokens", 400); err != nil {
			t.Errorf("ReportCost: %v", err)
		}
	}
	client := serveWith(t,
		grpc.ChainUnaryInterceptor(ic.Unary(), func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			report(ctx)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(ic.Stream(), func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			report(ss.Context())
			return h(srv, ss)
		}))
	// A stream: 100 spent when it opens, 400 once its handler returns.
	ctx, cancel := context.WithCancel(t.Context())
	w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	// The stream's handler returns once the server sees the cancel, and
	// its 400 are settled then: 600 left.
	for {
		r, err := loc.Peek(t.Context(), "tokens|k", limit)
		if err != nil {
			t.Fatal(err)
		}
		if r.Remaining == 600 {
			break
		}
		if r.Remaining != 900 {
			t.Fatalf("%d left after the stream, want 900 (open) or 600 (settled)", r.Remaining)
		}
		time.Sleep(time.Millisecond)
	}
	// Two calls of 400 on an estimate of 100: 200 left after the first,
	// and the second, admitted on its estimate, takes the key into debt.
	for i := range 2 {
		if _, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if _, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("after 1,200 used of 1,000: %v, want ResourceExhausted", err)
	}
}
