package main_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// egRoute is a rule's descriptor key as Envoy Gateway names it: the
// route's rule and match, its value the same.
const egRoute = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example"

// egRules are rules of the shape Envoy Gateway's translator makes for a
// BackendTrafficPolicy limiting each client address range: the rule's
// descriptor, then the masked client address.
var egRules = `domain: default/eg/http
descriptors:
  - key: ` + egRoute + `
    value: ` + egRoute + `
    descriptors:
      - key: masked_remote_address
        value: 0.0.0.0/0
        rate_limit: {unit: hour, requests_per_unit: 1}
`

// egMapping is a statsd_exporter mapping in the spelling Envoy Gateway's
// deployment mounts at PROMETHEUS_MAPPER_YAML (timer_type, a glob for
// rules one level deep, a regex for deeper ones).
const egMapping = `mappings:
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "ratelimit_service_rate_limit_over_limit"
    timer_type: "histogram"
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.over_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_over_limit"
    timer_type: "histogram"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.total_hits"
    match_type: regex
    name: "ratelimit_service_rate_limit_total_hits"
    timer_type: "histogram"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.near_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_near_limit"
    timer_type: "histogram"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
`

// TestEnvoyGatewayMetrics runs the query of Envoy Gateway's end-to-end
// test and its dashboard's series against /metrics, on the debug port and
// on PROMETHEUS_ADDR, with the default mapping and with a mapping file in
// Envoy Gateway's spelling.
func TestEnvoyGatewayMetrics(t *testing.T) {
	t.Parallel()
	for _, mapping := range []string{"default", "file"} {
		t.Run(mapping, func(t *testing.T) {
			promAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
			e := env(t, runtimeDir(t, map[string]string{"eg.yaml": egRules}), "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", promAddr)
			if mapping == "file" {
				path := filepath.Join(t.TempDir(), "conf.yaml")
				if err := os.WriteFile(path, []byte(egMapping), 0o644); err != nil {
					t.Fatal(err)
				}
				e["PROMETHEUS_MAPPER_YAML"] = path
			}
			p := start(t, rlsBinary(t), e)
			for range 2 {
				p.mustCall(request("default/eg/http", 0, entries(egRoute, egRoute, "masked_remote_address", "0.0.0.0/0")))
			}
			dashboard := `{domain="default/eg/http", key1="` + egRoute + "_" + egRoute + `", key2="masked_remote_address_0_0_0_0/0"}`
			for _, url := range []string{p.debugURL + "/metrics", "http://" + promAddr + "/metrics"} {
				_, body := p.get(url)
				for _, q := range []struct {
					expr string
					want float64 // -1: any value
				}{
					// Envoy Gateway's end-to-end test.
					{`ratelimit_service_rate_limit_over_limit{key2="masked_remote_address_0_0_0_0/0"}`, 1},
					// Its dashboard.
					{"ratelimit_service_rate_limit_total_hits" + dashboard, 2},
					{"ratelimit_service_rate_limit_over_limit" + dashboard, 1},
					{"ratelimit_service_rate_limit_near_limit" + dashboard, 1},
					{`process_resident_memory_bytes`, -1},
					{`process_virtual_memory_bytes`, -1},
					// go_memstats_gc_cpu_fraction, which the dashboard also
					// reads, is served by no client_golang since v1.12, the
					// reference's included.
					{`go_memstats_alloc_bytes`, -1},
					{`go_goroutines`, -1},
				} {
					got, n := query(t, body, q.expr)
					if n == 0 || (q.want >= 0 && got != q.want) {
						t.Errorf("%s: %s = %v over %d series, want %v", url, q.expr, got, n, q.want)
					}
				}
			}
			if t.Failed() {
				_, body := p.get(p.debugURL + "/metrics")
				t.Logf("/metrics:\n%s", body)
			}
		})
	}
}

var (
	selectorRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$`)
	matcherRE  = regexp.MustCompile(`\s*([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"\s*,?`)
)

// query evaluates an instant vector selector of equality matchers, as
// Prometheus would on a scrape of body: the sum of the matching series'
// values, and how many matched.
func query(t *testing.T, body, expr string) (sum float64, n int) {
	t.Helper()
	m := selectorRE.FindStringSubmatch(expr)
	if m == nil {
		t.Fatalf("%q: not a selector", expr)
	}
	want := map[string]string{}
	for _, mm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
		want[mm[1]] = mm[2]
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	fam := fams[m[1]]
	if fam == nil {
		return 0, 0
	}
	for _, s := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if match {
			sum += value(s)
			n++
		}
	}
	return sum, n
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
