package rls

import (
	"strings"
	"testing"
	"time"

	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRateLimitConfigType(t *testing.T) {
	a := anyOf(t, &rlsconfpb.RateLimitConfig{})
	if a.GetTypeUrl() != RateLimitConfigType {
		t.Fatalf("RateLimitConfigType = %q, the proto's is %q", RateLimitConfigType, a.GetTypeUrl())
	}
}

// TestLoadXDSConfig loads resources as Envoy Gateway sends them and checks
// that they mean what the same rules in YAML mean.
func TestLoadXDSConfig(t *testing.T) {
	rc := &rlsconfpb.RateLimitConfig{Name: "gw", Domain: "gw", Descriptors: []*rlsconfpb.RateLimitDescriptor{
		{Key: "route", Value: "r1", Descriptors: []*rlsconfpb.RateLimitDescriptor{{
			Key: "masked_remote_address", Value: "0.0.0.0/0",
			RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_SECOND, RequestsPerUnit: 5, Name: "a", Replaces: []*rlsconfpb.RateLimitReplace{{Name: "b"}}},
		}}},
		{Key: "free", RateLimit: &rlsconfpb.RateLimitPolicy{Unlimited: true}},
		{Key: "week", ShadowMode: true, DetailedMetric: true, RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_WEEK, RequestsPerUnit: 7}},
	}}
	c, err := LoadXDSConfig([]*anypb.Any{anyOf(t, rc)}, false)
	if err != nil {
		t.Fatal(err)
	}
	yamlText := `domain: gw
descriptors:
  - key: route
    value: r1
    descriptors:
      - key: masked_remote_address
        value: 0.0.0.0/0
        rate_limit: {unit: second, requests_per_unit: 5, name: a, replaces: [{name: b}]}
  - key: free
    rate_limit: {unlimited: true}
  - key: week
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: week, requests_per_unit: 7}
`
	want, err := LoadConfig([]File{{Name: "gw.yaml", Data: []byte(yamlText)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, w := c.Dump(), want.Dump(); got != w || got == "" {
		t.Fatalf("xDS rules:\n%s\nthe same rules in YAML:\n%s", got, w)
	}
	m, _ := c.lookup("gw", desc("route", "r1", "masked_remote_address", "0.0.0.0/0"))
	if r := m.rule; r == nil || r.Name != "a" || len(r.Replaces) != 1 || r.Replaces[0] != "b" || r.Period != time.Second {
		t.Fatalf("nested rule: %+v", r)
	}
	m, _ = c.lookup("gw", desc("week", "x"))
	if r := m.rule; r == nil || !r.Shadow || !r.DetailedMetric {
		t.Fatalf("week rule: %+v", r)
	}
	if f := c.Files(); len(f) != 1 || f[0] != `resource "gw"` {
		t.Fatalf("Files() = %q", f)
	}
}

func TestLoadXDSConfigErrors(t *testing.T) {
	unknown := &rlsconfpb.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_HOUR, RequestsPerUnit: 1}}
	// Field 7 of a descriptor is a newer API's (quota_mode).
	unknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 1))
	for _, tt := range []struct {
		name  string
		res   []*anypb.Any
		merge bool
		want  string
	}{
		{"another type", []*anypb.Any{anyOf(t, durationpb.New(time.Second))}, false, "is not " + RateLimitConfigType},
		{"no unit", []*anypb.Any{anyOf(t, &rlsconfpb.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconfpb.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfpb.RateLimitPolicy{RequestsPerUnit: 1}}}})}, false, `resource "n": "d.k" has unit ""`},
		{"unlimited with a unit", []*anypb.Any{anyOf(t, &rlsconfpb.RateLimitConfig{Domain: "d", Descriptors: []*rlsconfpb.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfpb.RateLimitPolicy{Unlimited: true, Unit: rlsconfpb.RateLimitUnit_DAY}}}})}, false, "resource 0: \"d.k\" is unlimited and has a unit"},
		{"no domain", []*anypb.Any{anyOf(t, &rlsconfpb.RateLimitConfig{Name: "n"})}, false, "no domain"},
		{"domain twice", []*anypb.Any{anyOf(t, &rlsconfpb.RateLimitConfig{Name: "a", Domain: "d"}), anyOf(t, &rlsconfpb.RateLimitConfig{Name: "b", Domain: "d"})}, false,
			`resource "b": domain "d" is defined again`},
		{"unknown field", []*anypb.Any{anyOf(t, &rlsconfpb.RateLimitConfig{Domain: "d", Descriptors: []*rlsconfpb.RateLimitDescriptor{unknown}})}, false,
			"RateLimitDescriptor carries field number 7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadXDSConfig(tt.res, tt.merge)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadXDSConfig = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	merged, err := LoadXDSConfig([]*anypb.Any{anyOf(t, rlConf("a", "d", "x")), anyOf(t, rlConf("b", "d", "y"))}, true)
	if err != nil || len(merged.Domains()) != 1 {
		t.Fatalf("two resources of one domain, merged: %v %v", merged, err)
	}
}

func rlConf(name, domain, key string) *rlsconfpb.RateLimitConfig {
	return &rlsconfpb.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconfpb.RateLimitDescriptor{
		{Key: key, RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_MINUTE, RequestsPerUnit: 1}}}}
}

func TestBackoffSeq(t *testing.T) {
	q := backoffSeq{b: Backoff{Initial: 100 * time.Millisecond, Max: time.Second}}
	for i, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		if got := q.next(); got != want*time.Millisecond {
			t.Fatalf("wait %d = %v, want %v", i, got, want*time.Millisecond)
		}
	}
	q.reset()
	if got := q.next(); got != 100*time.Millisecond {
		t.Fatalf("after reset: %v, want 100ms", got)
	}
	j := backoffSeq{b: Backoff{Initial: time.Second, Max: time.Second, RandomFactor: 0.5, Jitter: true}}
	for range 100 {
		if d := j.next(); d < 500*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("jittered wait %v outside [0.5s, 1.5s]", d)
		}
	}
}
