package rls

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCollector exports the stats under the reference's default mapping: a
// rule one level deep labelled domain and key1.
func TestCollector(t *testing.T) {
	svc, _ := fakeService(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 2}\n", map[string]int64{})
	for range 3 {
		if _, err := svc.ShouldRateLimit(context.Background(), request2("d", [][2]string{{"a", "x"}})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.ShouldRateLimit(context.Background(), request2("nowhere", [][2]string{{"a", "x"}})); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP ratelimit_service_rate_limit_total_hits Hits of descriptors that matched a rule, weighted by hits_addend.
# TYPE ratelimit_service_rate_limit_total_hits counter
ratelimit_service_rate_limit_total_hits{domain="d",key1="a",tag="t"} 3
# HELP ratelimit_service_rate_limit_over_limit Hits over the limit.
# TYPE ratelimit_service_rate_limit_over_limit counter
ratelimit_service_rate_limit_over_limit{domain="d",key1="a",tag="t"} 1
# HELP ratelimit_service_rate_limit_within_limit Hits admitted.
# TYPE ratelimit_service_rate_limit_within_limit counter
ratelimit_service_rate_limit_within_limit{domain="d",key1="a",tag="t"} 2
# HELP ratelimit_service_rate_limit_near_limit Hits admitted past NEAR_LIMIT_RATIO of the limit.
# TYPE ratelimit_service_rate_limit_near_limit counter
ratelimit_service_rate_limit_near_limit{domain="d",key1="a",tag="t"} 1
# HELP ratelimit_service_rate_limit_domain_not_found Descriptors of requests to a domain no rules define.
# TYPE ratelimit_service_rate_limit_domain_not_found counter
ratelimit_service_rate_limit_domain_not_found{domain="nowhere",tag="t"} 1
# HELP ratelimit_service_config_load_success Rules loads that succeeded.
# TYPE ratelimit_service_config_load_success counter
ratelimit_service_config_load_success{tag="t"} 1
# HELP ratelimit_service_should_rate_limit_error Calls answered with an error because Redis could not be asked.
# TYPE ratelimit_service_should_rate_limit_error counter
ratelimit_service_should_rate_limit_error{err_type="redis_error",tag="t"} 0
ratelimit_service_should_rate_limit_error{err_type="service_error",tag="t"} 0
# HELP ratelimit_service_total_requests ShouldRateLimit calls.
# TYPE ratelimit_service_total_requests counter
ratelimit_service_total_requests{grpc_method="ShouldRateLimit",tag="t"} 4
# HELP ratelimit_service_global_shadow_mode Responses SHADOW_MODE turned from OVER_LIMIT to OK.
# TYPE ratelimit_service_global_shadow_mode counter
ratelimit_service_global_shadow_mode{tag="t"} 0
`
	c, err := NewCollector(svc, prometheus.Labels{"tag": "t"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"ratelimit_service_rate_limit_total_hits", "ratelimit_service_rate_limit_over_limit", "ratelimit_service_rate_limit_within_limit",
		"ratelimit_service_rate_limit_near_limit", "ratelimit_service_rate_limit_domain_not_found", "ratelimit_service_config_load_success",
		"ratelimit_service_should_rate_limit_error", "ratelimit_service_total_requests", "ratelimit_service_global_shadow_mode"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "ratelimit_service_response_time_seconds"); n != 1 {
		t.Fatalf("response time series: %d, want 1", n)
	}
}

const deepRules = `domain: gw
descriptors:
  - key: route
    value: r1
    descriptors:
      - key: masked_remote_address
        value: 0.0.0.0/0
        rate_limit: {unit: hour, requests_per_unit: 1}
      - key: user
        descriptors:
          - key: plan
            rate_limit: {unit: hour, requests_per_unit: 5}
`

// TestCollectorKeyLevels: a rule two levels deep is labelled key1 and key2,
// as Envoy Gateway's end-to-end test and dashboard query it, an IPv4
// address in a value with its dots made underscores; deeper levels are left
// out, so the stats of rules that differ only there add up in one series.
func TestCollectorKeyLevels(t *testing.T) {
	svc, _ := fakeService(t, deepRules, map[string]int64{})
	for _, d := range [][][2]string{
		{{"route", "r1"}, {"masked_remote_address", "0.0.0.0/0"}},
		{{"route", "r1"}, {"masked_remote_address", "0.0.0.0/0"}},
		{{"route", "r1"}, {"user", "u1"}, {"plan", "free"}},
		{{"route", "r1"}, {"user", "u2"}, {"plan", "gold"}},
	} {
		if _, err := svc.ShouldRateLimit(context.Background(), request2("gw", d)); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP ratelimit_service_rate_limit_over_limit Hits over the limit.
# TYPE ratelimit_service_rate_limit_over_limit counter
ratelimit_service_rate_limit_over_limit{domain="gw",key1="route_r1",key2="masked_remote_address_0_0_0_0/0"} 1
ratelimit_service_rate_limit_over_limit{domain="gw",key1="route_r1",key2="user"} 0
# HELP ratelimit_service_rate_limit_total_hits Hits of descriptors that matched a rule, weighted by hits_addend.
# TYPE ratelimit_service_rate_limit_total_hits counter
ratelimit_service_rate_limit_total_hits{domain="gw",key1="route_r1",key2="masked_remote_address_0_0_0_0/0"} 2
ratelimit_service_rate_limit_total_hits{domain="gw",key1="route_r1",key2="user"} 2
`
	c, err := NewCollector(svc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelimit_service_rate_limit_over_limit", "ratelimit_service_rate_limit_total_hits"); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorMappingFile reads a statsd_exporter mapping file in the
// reference's spelling (timer_type): its names and labels apply, a drop
// action leaves stats out, names it does not match are escaped, and a timer
// without scale stays in milliseconds, as the reference's sink leaves it.
func TestCollectorMappingFile(t *testing.T) {
	svc, _ := fakeService(t, deepRules, map[string]int64{})
	if _, err := svc.ShouldRateLimit(context.Background(), request2("gw", [][2]string{{"route", "r1"}, {"masked_remote_address", "0.0.0.0/0"}})); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "conf.yaml")
	text := `mappings:
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.total_hits"
    match_type: regex
    name: "rl_hits"
    timer_type: "histogram"
    labels:
      zone: "$1"
      route: "$2"
  - match: "ratelimit.service.rate_limit.*.*.*.over_limit"
    name: "dropped"
    action: drop
  - match: "ratelimit_server.*.response_time"
    name: "rl_time_ms"
    timer_type: histogram
    labels:
      method: "$1"
`
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := LoadMetricMapping(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCollector(svc, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP rl_hits Hits of descriptors that matched a rule, weighted by hits_addend.
# TYPE rl_hits counter
rl_hits{route="route_r1",zone="gw"} 1
# HELP ratelimit_service_config_load_success Rules loads that succeeded.
# TYPE ratelimit_service_config_load_success counter
ratelimit_service_config_load_success 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "rl_hits", "ratelimit_service_config_load_success", "dropped",
		"ratelimit_service_rate_limit_over_limit"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.Contains(f.GetName(), "over_limit") {
			t.Errorf("%s: the drop action did not drop it", f.GetName())
		}
		if f.GetName() == "rl_time_ms" {
			h := f.GetMetric()[0].GetHistogram()
			if b := h.GetBucket()[0].GetUpperBound(); b != 0.1 {
				t.Errorf("rl_time_ms first bucket %v, want 0.1 (100us in milliseconds)", b)
			}
		}
	}
	if _, err := LoadMetricMapping(filepath.Join(t.TempDir(), "none.yaml")); err == nil || !strings.Contains(err.Error(), "PROMETHEUS_MAPPER_YAML") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("mappings:\n  - match: a.b\n    name: \"1bad\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadMetricMapping(bad); err == nil {
		t.Error("a mapping with an invalid metric name: no error")
	}
}

// TestCollectorClash: a mapping that gives one metric name two sets of
// labels keeps the first and counts the stats it leaves out.
func TestCollectorClash(t *testing.T) {
	svc, _ := fakeService(t, deepRules, map[string]int64{})
	if _, err := svc.ShouldRateLimit(context.Background(), request2("gw", [][2]string{{"route", "r1"}, {"masked_remote_address", "0.0.0.0/0"}})); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "conf.yaml")
	text := "mappings:\n  - match: \"ratelimit.service.*\"\n    name: svc\n  - match: \"ratelimit_server.*.total_requests\"\n    name: svc\n    labels: {method: \"$1\"}\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := LoadMetricMapping(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCollector(svc, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
	if v := testutil.ToFloat64(gaugeOf(t, reg, "hybridlimit_rls_metric_series_dropped")); v == 0 {
		t.Fatal("hybridlimit_rls_metric_series_dropped = 0, want the clashing stats counted")
	}
}

// TestCollectorBounded: stats made from request values stay within
// HYBRIDLIMIT_MAX_STAT_KEYS series whatever the mapping.
func TestCollectorBounded(t *testing.T) {
	svc, _ := fakeService(t, "domain: d\ndescriptors:\n  - key: ip\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 2}\n", map[string]int64{})
	svc.rules = newStatSet(10)
	for i := range 50 {
		ip := "10.0.0." + string(rune('0'+i%10)) + string(rune('0'+i/10))
		if _, err := svc.ShouldRateLimit(context.Background(), request2("d", [][2]string{{"ip", ip}})); err != nil {
			t.Fatal(err)
		}
	}
	c, err := NewCollector(svc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "ratelimit_service_rate_limit_total_hits"); n != 11 {
		t.Fatalf("%d total_hits series from 50 values, want 11: 10 and the overflow", n)
	}
}

// gaugeOf is a registry's one series of a metric, as a collector.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			g.Set(f.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("%s not gathered", name)
	return nil
}
