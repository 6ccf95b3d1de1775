package rls

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/prometheus/statsd_exporter/pkg/mapper"
	"go.yaml.in/yaml/v3"
)

// MetricMapping names the reference's stats in Prometheus as its Prometheus
// sink does: a statsd_exporter mapping turns each dotted stat name
// ("ratelimit.service.rate_limit.edge.remote_address.over_limit") into a
// metric name and labels; a name no mapping matches is escaped into a metric
// name of its own (dots to underscores) without labels, and a mapping whose
// action is drop leaves its stats out. The mapping is statsd_exporter's own
// code (package mapper), so a user's mapping file means here what it means to
// the reference. A MetricMapping is safe for concurrent use.
type MetricMapping struct {
	m *mapper.MetricMapper
}

// defaultRuleStats are the per-rule stats the default mapping names.
var defaultRuleStats = []string{"near_limit", "over_limit", "total_hits", "within_limit", "shadow_mode"}

// mappingEntry is one mapping of a statsd_exporter mapping file.
type mappingEntry struct {
	Match           string            `yaml:"match"`
	MatchType       string            `yaml:"match_type,omitempty"`
	Name            string            `yaml:"name"`
	MatchMetricType string            `yaml:"match_metric_type,omitempty"`
	ObserverType    string            `yaml:"observer_type,omitempty"`
	Scale           *float64          `yaml:"scale,omitempty"`
	Labels          map[string]string `yaml:"labels,omitempty"`
}

// DefaultMetricMapping is the reference's default mapping: a rule's stats
// labelled domain and key1 (the first level of its stat key) when the rule
// is one level deep, domain, key1 and key2 (the second level; deeper ones
// are left out) when deeper; the call errors labelled err_type; the request
// count and response time labelled grpc_method, the time in seconds unless
// responseTimeMS (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS); the config
// loads. One mapping is added: domain_not_found labelled domain, where the
// reference's mapping leaves the domain in the metric's name, a name per
// domain asked for.
func DefaultMetricMapping(responseTimeMS bool) (*MetricMapping, error) {
	var ms []mappingEntry
	for _, stat := range defaultRuleStats {
		ms = append(ms, mappingEntry{
			Match: "ratelimit.service.rate_limit.*.*." + stat, Name: "ratelimit_service_rate_limit_" + stat,
			ObserverType: "histogram", Labels: map[string]string{"domain": "$1", "key1": "$2"},
		})
	}
	for _, stat := range defaultRuleStats {
		ms = append(ms, mappingEntry{
			Match:     `ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.` + stat,
			MatchType: "regex", Name: "ratelimit_service_rate_limit_" + stat,
			ObserverType: "histogram", Labels: map[string]string{"domain": "$1", "key1": "$2", "key2": "$3"},
		})
	}
	var scale *float64
	if !responseTimeMS {
		s := 0.001
		scale = &s
	}
	ms = append(ms,
		mappingEntry{Match: "ratelimit.service.call.should_rate_limit.*", Name: "ratelimit_service_should_rate_limit_error",
			MatchMetricType: "counter", Labels: map[string]string{"err_type": "$1"}},
		mappingEntry{Match: "ratelimit_server.*.total_requests", Name: "ratelimit_service_total_requests",
			MatchMetricType: "counter", Labels: map[string]string{"grpc_method": "$1"}},
		mappingEntry{Match: "ratelimit_server.*.response_time", Name: "ratelimit_service_response_time_seconds",
			ObserverType: "histogram", Scale: scale, Labels: map[string]string{"grpc_method": "$1"}},
		mappingEntry{Match: "ratelimit.service.config_load_success", Name: "ratelimit_service_config_load_success", MatchMetricType: "counter"},
		mappingEntry{Match: "ratelimit.service.config_load_error", Name: "ratelimit_service_config_load_error", MatchMetricType: "counter"},
		mappingEntry{Match: "ratelimit.service.rate_limit.*.domain_not_found", Name: "ratelimit_service_rate_limit_domain_not_found",
			MatchMetricType: "counter", Labels: map[string]string{"domain": "$1"}},
	)
	text, err := yaml.Marshal(map[string]any{"mappings": ms})
	if err != nil {
		return nil, fmt.Errorf("rls: the default metric mapping: %w", err)
	}
	m, err := parseMapping(text)
	if err != nil {
		return nil, fmt.Errorf("rls: the default metric mapping: %w", err)
	}
	return m, nil
}

// LoadMetricMapping reads a statsd_exporter mapping file
// (PROMETHEUS_MAPPER_YAML). The reference's files spell a mapping's
// observer type timer_type, as statsd_exporter once did; that spelling is
// read too. A file that does not exist is reported with fs.ErrNotExist.
func LoadMetricMapping(path string) (*MetricMapping, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rls: PROMETHEUS_MAPPER_YAML: %w", err)
	}
	m, err := parseMapping(text)
	if err != nil {
		return nil, fmt.Errorf("rls: PROMETHEUS_MAPPER_YAML: %s: %w", path, err)
	}
	return m, nil
}

func parseMapping(text []byte) (*MetricMapping, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return nil, err
	}
	renameTimerType(&doc)
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, err
	}
	m := &mapper.MetricMapper{}
	if err := m.InitFromYAMLString(string(out)); err != nil {
		return nil, err
	}
	return &MetricMapping{m: m}, nil
}

// renameTimerType renames the key timer_type to observer_type in the
// mappings and the defaults of a mapping document.
func renameTimerType(n *yaml.Node) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			renameTimerType(c)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Value == "timer_type" {
				k.Value = "observer_type"
			}
			renameTimerType(n.Content[i+1])
		}
	}
}

// metricKind is the statsd type of a stat.
type metricKind int

const (
	kindCounter metricKind = iota
	kindTimer
)

// name maps one stat: ok is false when its mapping drops it. scale is the
// factor its values take (1 but for a mapping's scale).
func (mm *MetricMapping) name(stat string, kind metricKind) (name string, labels map[string]string, scale float64, ok bool) {
	t := mapper.MetricTypeCounter
	if kind == kindTimer {
		t = mapper.MetricTypeObserver
	}
	m, labels, found := mm.m.GetMapping(stat, t)
	if !found {
		return mapper.EscapeMetricName(stat), nil, 1, true
	}
	if m.Action == mapper.ActionTypeDrop {
		return "", nil, 0, false
	}
	scale = 1
	if m.Scale.Set {
		scale = m.Scale.Val
	}
	return m.Name, labels, scale, true
}

// metricMappingFrom returns the mapping the settings ask for: the file of
// PROMETHEUS_MAPPER_YAML, or the default. A file that does not exist gives
// the default and a note saying so (Envoy Gateway mounts its mapping from a
// ConfigMap it marks optional); any other error stops the service.
func metricMappingFrom(set Settings) (m *MetricMapping, note string, err error) {
	if set.PrometheusMapperYAML == "" {
		m, err = DefaultMetricMapping(set.PrometheusResponseTimeMS)
		return m, "", err
	}
	m, err = LoadMetricMapping(set.PrometheusMapperYAML)
	if errors.Is(err, fs.ErrNotExist) {
		m, err = DefaultMetricMapping(set.PrometheusResponseTimeMS)
		return m, fmt.Sprintf("PROMETHEUS_MAPPER_YAML: %s does not exist: the default mapping is used", set.PrometheusMapperYAML), err
	}
	return m, "", err
}
