package rls

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

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
ratelimit_service_rate_limit_total_hits{domain="d",key="a",tag="t"} 3
# HELP ratelimit_service_rate_limit_over_limit Hits over the limit.
# TYPE ratelimit_service_rate_limit_over_limit counter
ratelimit_service_rate_limit_over_limit{domain="d",key="a",tag="t"} 1
# HELP ratelimit_service_rate_limit_within_limit Hits admitted.
# TYPE ratelimit_service_rate_limit_within_limit counter
ratelimit_service_rate_limit_within_limit{domain="d",key="a",tag="t"} 2
# HELP ratelimit_service_rate_limit_near_limit Hits admitted past NEAR_LIMIT_RATIO of the limit.
# TYPE ratelimit_service_rate_limit_near_limit counter
ratelimit_service_rate_limit_near_limit{domain="d",key="a",tag="t"} 1
# HELP ratelimit_service_rate_limit_domain_not_found Descriptors of requests to a domain no rules file defines.
# TYPE ratelimit_service_rate_limit_domain_not_found counter
ratelimit_service_rate_limit_domain_not_found{domain="nowhere",tag="t"} 1
# HELP ratelimit_service_config_load_success Rules loads that succeeded.
# TYPE ratelimit_service_config_load_success counter
ratelimit_service_config_load_success{tag="t"} 1
`
	c := NewCollector(svc, prometheus.Labels{"tag": "t"})
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"ratelimit_service_rate_limit_total_hits", "ratelimit_service_rate_limit_over_limit", "ratelimit_service_rate_limit_within_limit",
		"ratelimit_service_rate_limit_near_limit", "ratelimit_service_rate_limit_domain_not_found", "ratelimit_service_config_load_success"); err != nil {
		t.Fatal(err)
	}
}
