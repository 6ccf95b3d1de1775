package rls

import (
	"errors"
	"strings"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoadConfigErrors(t *testing.T) {
	const ok = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n", `d.yaml:4: unknown key "rate_limt"`},
		{"unknown key deep", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 2}\n", `unknown key "burst"`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "is unlimited and has a unit"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `unit "fortnight"`},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", `unit ""`},
		{"duplicate", ok + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n", `composite key "d.k" is defined twice`},
		{"no key", "domain: d\ndescriptors:\n  - value: v\n", "has no key"},
		{"no domain", "descriptors: []\n", "no domain"},
		{"empty file", "", "no domain"},
		{"share without star", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "share_threshold needs a wildcard"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: n, unit: second, requests_per_unit: 1, replaces: [{name: n}]}\n", "replaces itself"},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "without a name"},
		{"negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "cannot unmarshal"},
		{"too big", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", "cannot unmarshal"},
		{"float", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n", "not a whole number"},
		{"list of scalars", "domain: d\ndescriptors: [a]\n", "only mappings"},
		{"bad yaml", "domain: [\n", "d.yaml"},
		{"metadata not a map", "domain: d\ndescriptors:\n  - key: k\n    metadata: 3\n", "metadata must be a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfig([]File{{Name: "d.yaml", Data: []byte(tt.yaml)}}, false)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadConfig(%q) = %v, want an ErrConfig saying %q", tt.yaml, err, tt.want)
			}
		})
	}
	if _, err := LoadConfig([]File{{"a.yaml", []byte(ok)}, {"b.yaml", []byte(ok)}}, false); err == nil || !strings.Contains(err.Error(), "defined again") {
		t.Fatalf("a domain in two files: %v", err)
	}
	other := "domain: d\ndescriptors:\n  - key: j\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	if _, err := LoadConfig([]File{{"a.yaml", []byte(ok)}, {"b.yaml", []byte(other)}}, true); err != nil {
		t.Fatalf("merged: %v", err)
	}
}

func desc(kv ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestLookup(t *testing.T) {
	const yaml = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: exact
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /a/*/c*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: /a/*
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: user
    value: "*"
    share_threshold: true
    descriptors:
      - key: op
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: v
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 6}
  - key: det
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 7}
`
	c, err := LoadConfig([]File{{"d.yaml", []byte(yaml)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		d     *rlpb.RateLimitDescriptor
		rpu   int // -1: no rule
		stat  string
		share string // the pattern of entry 0, if shared
	}{
		{desc("k", "x"), 1, "d.k", ""},
		{desc("k", "exact"), 2, "d.k_exact", ""},
		{desc("path", "/a/b/cd"), 3, "d.path_/a/*/c*", ""}, // the first declared wildcard wins
		{desc("path", "/a/b/d"), 4, "d.path_/a/*", ""},
		{desc("path", "/b"), -1, "", ""},
		{desc("user", "u1", "op", "read"), 5, "d.user_*.op", "*"},
		{desc("user", "u1"), -1, "", ""},            // the rule is one level deeper
		{desc("k", "x", "deeper", "y"), -1, "", ""}, // the rule is one level shallower
		{desc("v", "val"), 6, "d.v_val", ""},
		{desc("det", "val"), 7, "d.det_val", ""},
		{desc("nothing", "x"), -1, "", ""},
	}
	for _, tt := range tests {
		m, known := c.lookup("d", tt.d)
		if !known {
			t.Fatalf("lookup(d, %v): unknown domain", tt.d)
		}
		switch {
		case tt.rpu < 0 && m.rule != nil:
			t.Errorf("lookup(%v) = rule %s, want none", tt.d, m.rule.FullKey)
		case tt.rpu >= 0 && (m.rule == nil || int(m.rule.RequestsPerUnit) != tt.rpu || m.statKey != tt.stat):
			t.Errorf("lookup(%v) = %+v, want rpu %d stat %q", tt.d, m, tt.rpu, tt.stat)
		case tt.share != "" && (m.share == nil || m.share[0] != tt.share):
			t.Errorf("lookup(%v) share = %q, want %q", tt.d, m.share, tt.share)
		}
	}
	if _, known := c.lookup("other", desc("k", "x")); known {
		t.Error("lookup(other) says the domain is known")
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, s string
		want       bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "b", false},
		{"*c", "abc", true}, {"a*c", "ac", true}, {"a*c", "abbc", true}, {"a*c", "acb", false},
		{"a*b*c", "abc", true}, {"a*b*c", "aXbYc", true}, {"a*b*c", "acb", false},
		{"ab*ba", "aba", false}, {"*", "", true}, {"x", "x", true}, {"x", "y", false},
	} {
		if got := globMatch(strings.Split(tt.pattern, "*"), tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

// TestStatKeysBounded: stat keys past the cap count under one overflow key.
func TestStatKeysBounded(t *testing.T) {
	s := newStatSet(3)
	for i := range 10 {
		s.get("d", "d.k_"+string(rune('a'+i))).total.Add(1)
	}
	snap := s.snapshot()
	if len(snap) != 4 || s.dropped.Load() != 7 {
		t.Fatalf("%d series, %d dropped; want 3 and the overflow, 7 dropped", len(snap), s.dropped.Load())
	}
	var overflow uint64
	for _, r := range snap {
		if r.Key == OverflowKey {
			overflow = r.TotalHits
		}
	}
	if overflow != 7 {
		t.Fatalf("overflow counted %d hits, want 7", overflow)
	}
}

func request2(domain string, descriptors ...[][2]string) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: domain}
	for _, d := range descriptors {
		var kv []string
		for _, e := range d {
			kv = append(kv, e[0], e[1])
		}
		r.Descriptors = append(r.Descriptors, desc(kv...))
	}
	return r
}

func wrapUint64(v uint64) *wrapperspb.UInt64Value { return wrapperspb.UInt64(v) }
