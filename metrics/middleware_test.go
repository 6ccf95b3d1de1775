package metrics

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
)

// TestMiddlewareCollector drives a middleware with an exact limiter on a
// real Redis and a local one, through real HTTP round trips, and compares
// every series.
func TestMiddlewareCollector(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	if len(p) > 64 {
		p = "t:" + p[len(p)-62:]
	}
	exact, err := global.New(rdb, global.FixedWindow, global.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := local.NewTable()
	if err != nil {
		t.Fatal(err)
	}
	loc, err := rules.NewLocal(tbl)
	if err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.New([]httplimit.Rule{
		{Name: "per-key", Limiter: exact, Limit: hybridlimit.PerHour(2), Key: httplimit.APIKey("X-API-Key")},
		{Name: "trial", Limiter: loc, Limit: hybridlimit.PerHour(1), Key: httplimit.Static("all"), Shadow: true, Exempt: httplimit.Methods("HEAD")},
		{Name: "per-route", Limiter: loc, Limit: hybridlimit.PerHour(100), Key: httplimit.Route()},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for _, req := range []struct{ method, key string }{
		{"GET", "k"}, {"GET", "k"}, {"GET", "k"}, {"GET", ""}, {"HEAD", "k"},
	} {
		r, _ := http.NewRequest(req.method, srv.URL, nil)
		if req.key != "" {
			r.Header.Set("X-API-Key", req.key)
		}
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	c, err := NewMiddlewareCollector(m, WithConstLabels(prometheus.Labels{"limiter_name": "edge"}))
	if err != nil {
		t.Fatal(err)
	}
	// Three keyed GETs: two allowed, one denied by per-key, which ends
	// that request's evaluation; the keyless GET has no per-key key; the
	// HEAD is denied by per-key too. The shadow rule sees the three
	// requests per-key let through: it admits the first and would deny
	// the next two. So does the route rule, which sees no route in a
	// middleware around a plain handler: misconfigured, each time.
	series := func(rule, limiter, mode string, counts map[string]int) string {
		var b strings.Builder
		for o := range rules.NumOutcomes {
			b.WriteString(`hybridlimit_http_rule_decisions_total{limiter="` + limiter + `",limiter_name="edge",mode="` + mode +
				`",outcome="` + o.String() + `",rule="` + rule + `"} ` + strconv.Itoa(counts[o.String()]) + "\n")
		}
		return b.String()
	}
	errs := func(rule, limiter string) string {
		var b strings.Builder
		for _, e := range hybridlimit.LimiterErrorClasses() {
			b.WriteString(`hybridlimit_http_limiter_errors_total{class="` + e.String() + `",limiter="` + limiter +
				`",limiter_name="edge",rule="` + rule + `"} 0` + "\n")
		}
		return b.String()
	}
	want := `
# HELP hybridlimit_http_limiter_errors_total Errors returned by a rule's limiter instead of a decision or a refund, by class.
# TYPE hybridlimit_http_limiter_errors_total counter
` + errs("per-key", "global") + errs("trial", "local") + errs("per-route", "local") + `# HELP hybridlimit_http_requests_total Requests the rate-limit middleware saw, by what it did with them.
# TYPE hybridlimit_http_requests_total counter
hybridlimit_http_requests_total{limiter_name="edge",result="admitted"} 3
hybridlimit_http_requests_total{limiter_name="edge",result="canceled"} 0
hybridlimit_http_requests_total{limiter_name="edge",result="limited"} 2
hybridlimit_http_requests_total{limiter_name="edge",result="unavailable"} 0
# HELP hybridlimit_http_rule_decisions_total Rate-limit rule outcomes per request, admissions included.
# TYPE hybridlimit_http_rule_decisions_total counter
` + series("per-key", "global", "enforce", map[string]int{"allowed": 2, "denied": 2, "no_key": 1}) +
		series("trial", "local", "shadow", map[string]int{"allowed": 1, "shadow_denied": 2}) +
		series("per-route", "local", "enforce", map[string]int{"misconfigured": 3})
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "hybridlimit_http_limiter_errors_total",
		"hybridlimit_http_requests_total", "hybridlimit_http_rule_decisions_total"); err != nil {
		t.Error(err)
	}
	// One check-duration observation per request, in the buckets.
	mfs, err := testutil.CollectAndFormat(c, expfmt.TypeTextPlain, "hybridlimit_http_check_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if text := string(mfs); !strings.Contains(text, `hybridlimit_http_check_duration_seconds_count{limiter_name="edge"} 5`) ||
		!strings.Contains(text, `hybridlimit_http_check_duration_seconds_bucket{limiter_name="edge",le="0.1"} 5`) {
		t.Errorf("check duration histogram:\n%s", text)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	if _, err := NewMiddlewareCollector(nil); err == nil {
		t.Error("NewMiddlewareCollector(nil) succeeded")
	}
}

// TestConstLabelsClash names a constant label like a variable one: the
// middleware collector was made, and registering it failed (MustRegister
// panicked), with the very example the option's doc gave.
func TestConstLabelsClash(t *testing.T) {
	tbl, err := local.NewTable()
	if err != nil {
		t.Fatal(err)
	}
	loc, err := rules.NewLocal(tbl)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Rule{{Name: "r", Limiter: loc, Limit: hybridlimit.PerHour(2), Key: httplimit.Static("a")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMiddlewareCollector(mw, WithConstLabels(prometheus.Labels{"limiter": "public-api"})); err == nil {
		t.Error("NewMiddlewareCollector with a constant label named limiter succeeded")
	}
	if _, err := NewHybridCollector(&fakeHybrid{}, WithConstLabels(prometheus.Labels{"class": "x"})); err == nil {
		t.Error("NewHybridCollector with a constant label named class succeeded")
	}
	c, err := NewMiddlewareCollector(mw, WithConstLabels(prometheus.Labels{"service": "public-api"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := prometheus.NewPedanticRegistry().Register(c); err != nil {
		t.Error(err)
	}
}

// TestConstLabelsReserved names a constant label "le" or "quantile", the
// labels the exposition format gives histogram buckets and summary
// quantiles, or like any collector's variable label. "le" was accepted,
// and every bucket line of the hybrid collector's histograms then carried
// it twice, which a Prometheus server rejects: the whole scrape failed.
func TestConstLabelsReserved(t *testing.T) {
	tbl, err := local.NewTable()
	if err != nil {
		t.Fatal(err)
	}
	loc, err := rules.NewLocal(tbl)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Rule{{Name: "r", Limiter: loc, Limit: hybridlimit.PerHour(2), Key: httplimit.Static("a")}})
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeHybrid{RoundDuration: hybridlimit.Histogram{Bounds: []float64{0.001, 0.01}, Buckets: []uint64{1, 2}, Count: 2, Sum: 0.005}}
	for _, name := range []string{"le", "quantile", "outcome", "path", "class"} {
		if _, err := NewHybridCollector(src, WithConstLabels(prometheus.Labels{name: "x"})); err == nil {
			t.Errorf("NewHybridCollector(WithConstLabels(%q)) succeeded", name)
		}
	}
	for _, name := range []string{"le", "quantile", "result", "rule", "limiter", "mode", "outcome", "class"} {
		if _, err := NewMiddlewareCollector(mw, WithConstLabels(prometheus.Labels{name: "x"})); err == nil {
			t.Errorf("NewMiddlewareCollector(WithConstLabels(%q)) succeeded", name)
		}
	}
}

// TestInterceptorCollector: the gRPC interceptors' counters, under grpc_
// names.
func TestInterceptorCollector(t *testing.T) {
	tbl, err := local.NewTable()
	if err != nil {
		t.Fatal(err)
	}
	loc, err := rules.NewLocal(tbl)
	if err != nil {
		t.Fatal(err)
	}
	ic, err := grpclimit.New([]grpclimit.Rule{{Name: "per-method", Limiter: loc, Limit: hybridlimit.PerHour(1), Key: grpclimit.Method()}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := ic.Check(&grpclimit.Call{Ctx: t.Context(), FullMethod: "/a.B/C"}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := NewInterceptorCollector(ic)
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP hybridlimit_grpc_requests_total Requests the rate-limit interceptor saw, by what it did with them.
# TYPE hybridlimit_grpc_requests_total counter
hybridlimit_grpc_requests_total{result="admitted"} 1
hybridlimit_grpc_requests_total{result="canceled"} 0
hybridlimit_grpc_requests_total{result="limited"} 1
hybridlimit_grpc_requests_total{result="unavailable"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "hybridlimit_grpc_requests_total"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	if _, err := NewInterceptorCollector(nil); err == nil {
		t.Error("NewInterceptorCollector(nil) succeeded")
	}
}
