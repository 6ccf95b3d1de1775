package metrics

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/hybridlimit/hybridlimit/httplimit"
)

// TestAlertsUseExportedMetrics checks the alerting rules of metrics/alerts
// against the collectors: every metric a rule's expression names is one
// they export, with the labels it matches on. (promtool, in make test,
// checks the rules' syntax and runs their unit tests.)
func TestAlertsUseExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("alerts/hybridlimit.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	hybrid, err := NewHybridCollector(&fakeHybrid{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := NewMiddlewareCollector(new(httplimit.Middleware))
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string][]string{} // metric name -> its variable labels
	descs := make(chan *prometheus.Desc, 100)
	hybrid.Describe(descs)
	mw.Describe(descs)
	close(descs)
	descRE := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	for d := range descs {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		exported[m[1]] = regexp.MustCompile(`\w+`).FindAllString(m[2], -1)
	}
	selector := regexp.MustCompile(`(hybridlimit_\w+)(\{([^}]*)\})?`)
	rules := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			rules++
			if r.Annotations["runbook"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary or runbook annotation", r.Alert)
			}
			for _, m := range selector.FindAllStringSubmatch(r.Expr, -1) {
				labels, ok := exported[m[1]]
				if !ok {
					t.Errorf("%s: %s is not a metric the collectors export", r.Alert, m[1])
					continue
				}
				for _, matcher := range regexp.MustCompile(`(\w+)\s*=~?`).FindAllStringSubmatch(m[3], -1) {
					if !slices.Contains(labels, matcher[1]) {
						t.Errorf("%s: %s has no label %q (it has %v)", r.Alert, m[1], matcher[1], labels)
					}
				}
			}
		}
	}
	if rules < 8 {
		t.Errorf("%d alerting rules, want every way of failing covered", rules)
	}
}
