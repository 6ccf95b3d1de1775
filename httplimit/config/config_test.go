package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/rules"
	"go.yaml.in/yaml/v3"
)

const configYAML = `
headers:
  legacy: true
client_ip:
  trusted_proxies: [10.0.0.0/8, "2001:db8::/32"]
  header: forwarded
  ipv6_prefix: 56
rules:
  - name: per-ip
    limit: {rate: 100, period: 1m}
    key: ip
  - name: per-key
    limiter: global
    algorithm: sliding-window
    limit: {rate: 1000, period: 60, burst: 500}
    key: [api_key:X-Key, method]
    cost: 2
    shadow: true
    settle: true
    on_error: closed
    fail_retry: 1.5
    quota_unit: requests
    match:
      methods: [GET, HEAD]
    exempt:
      ips: [192.0.2.0/24]
      methods: [OPTIONS]
      paths: [/healthz]
      headers: {X-Internal: [s3cret]}
  - name: local
    limiter: local
    limit: {rate: 5, period: 1s}
    key: [static:all]
`

const configJSON = `{
  "headers": {"legacy": true},
  "client_ip": {"trusted_proxies": ["10.0.0.0/8", "2001:db8::/32"], "header": "forwarded", "ipv6_prefix": 56},
  "rules": [
    {"name": "per-ip", "limit": {"rate": 100, "period": "1m"}, "key": "ip"},
    {"name": "per-key", "limiter": "global", "algorithm": "sliding-window",
     "limit": {"rate": 1000, "period": 60, "burst": 500}, "key": ["api_key:X-Key", "method"],
     "cost": 2, "shadow": true, "settle": true, "on_error": "closed", "fail_retry": 1.5, "quota_unit": "requests",
     "match": {"methods": ["GET", "HEAD"]},
     "exempt": {"ips": ["192.0.2.0/24"], "methods": ["OPTIONS"], "paths": ["/healthz"], "headers": {"X-Internal": ["s3cret"]}}},
    {"name": "local", "limiter": "local", "limit": {"rate": 5, "period": "1s"}, "key": ["static:all"]}
  ]
}`

func TestParseConfig(t *testing.T) {
	y, err := Parse([]byte(configYAML), YAML)
	if err != nil {
		t.Fatal(err)
	}
	j, err := Parse([]byte(configJSON), JSON)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(y, j) {
		t.Errorf("YAML and JSON differ:\n%+v\n%+v", y, j)
	}
	// JSON is YAML too.
	if jy, err := Parse([]byte(configJSON), YAML); err != nil || !reflect.DeepEqual(jy, j) {
		t.Errorf("JSON parsed as YAML = %+v, %v", jy, err)
	}
	want := RuleConfig{
		Name: "per-key", Limiter: "global", Algorithm: "sliding-window",
		Limit: LimitConfig{Rate: 1000, Period: Duration(time.Minute), Burst: 500},
		Key:   []string{"api_key:X-Key", "method"}, Cost: 2, Shadow: true, Settle: true, OnError: "closed",
		FailRetry: Duration(1500 * time.Millisecond), QuotaUnit: "requests",
		Match: MatchConfig{Methods: []string{"GET", "HEAD"}},
		Exempt: MatchConfig{IPs: []string{"192.0.2.0/24"}, Methods: []string{"OPTIONS"}, Paths: []string{"/healthz"},
			Headers: map[string]StringList{"X-Internal": {"s3cret"}}},
	}
	if !reflect.DeepEqual(y.Rules[1], want) {
		t.Errorf("rules[1] = %+v\nwant %+v", y.Rules[1], want)
	}
	if y.Rules[0].Key[0] != "ip" || time.Duration(y.Rules[0].Limit.Period) != time.Minute {
		t.Errorf("rules[0] = %+v", y.Rules[0])
	}
}

// TestParseConfigErrors checks that every invalid config is rejected with
// an error naming the field, in both formats where the schema is at fault.
func TestParseConfigErrors(t *testing.T) {
	rule := func(fields string) string {
		return `{"rules": [{"name": "ok", "limit": {"rate": 1, "period": "1s"}, "key": "ip"}, {` + fields + `}]}`
	}
	base := `"name": "r", "limit": {"rate": 10, "period": "1m"}, "key": "ip"`
	tests := []struct {
		name, json, want string
	}{
		{"unknown top-level field", `{"rulez": []}`, "rulez: unknown field"},
		{"unknown rule field", rule(base + `, "colour": "red"`), "rules[1].colour: unknown field"},
		{"unknown limit field", rule(`"name": "r", "key": "ip", "limit": {"rate": 1, "period": "1s", "brust": 1}`), "rules[1].limit.brust: unknown field"},
		{"zero period", rule(`"name": "r", "key": "ip", "limit": {"rate": 10, "period": 0}`), "rules[1].limit.period: must be > 0"},
		{"missing period", rule(`"name": "r", "key": "ip", "limit": {"rate": 10}`), "rules[1].limit.period: must be > 0"},
		{"negative period", rule(`"name": "r", "key": "ip", "limit": {"rate": 10, "period": "-1s"}`), "rules[1].limit.period: must be > 0"},
		{"bad period", rule(`"name": "r", "key": "ip", "limit": {"rate": 10, "period": "soon"}`), `rules[1].limit.period: want a duration`},
		{"tiny period", rule(`"name": "r", "key": "ip", "limit": {"rate": 10, "period": "1us"}`), "rules[1].limit.period: 1µs is outside"},
		{"zero rate", rule(`"name": "r", "key": "ip", "limit": {"period": "1s"}`), "rules[1].limit.rate: must be in [1,"},
		{"rate as string", rule(`"name": "r", "key": "ip", "limit": {"rate": "10", "period": "1s"}`), `rules[1].limit.rate: want an integer, got "10"`},
		{"fractional rate", rule(`"name": "r", "key": "ip", "limit": {"rate": 1.5, "period": "1s"}`), `rules[1].limit.rate: want an integer, got 1.5`},
		{"negative burst", rule(`"name": "r", "key": "ip", "limit": {"rate": 1, "period": "1s", "burst": -1}`), "rules[1].limit.burst: must be in"},
		{"refill too long", rule(`"name": "r", "key": "ip", "limit": {"rate": 1, "period": "8000h", "burst": 2}`), "rules[1].limit: hybridlimit: invalid limit"},
		{"no name", rule(`"limit": {"rate": 1, "period": "1s"}, "key": "ip"`), "rules[1].name: empty"},
		{"duplicate name", rule(`"name": "ok", "limit": {"rate": 1, "period": "1s"}, "key": "ip"`), `rules[1].name: "ok" is also the name of rules[0]`},
		{"non-ASCII name", rule(`"name": "é", "limit": {"rate": 1, "period": "1s"}, "key": "ip"`), "rules[1].name: byte 0xc3"},
		{"no key", rule(`"name": "r", "limit": {"rate": 1, "period": "1s"}`), "rules[1].key: required"},
		{"bad key part", rule(`"name": "r", "limit": {"rate": 1, "period": "1s"}, "key": ["ip", "cookie"]`), `rules[1].key[1]: unknown key part "cookie"`},
		{"header without name", rule(`"name": "r", "limit": {"rate": 1, "period": "1s"}, "key": "header:"`), `rules[1].key[0]: "header" needs an argument`},
		{"ip with argument", rule(`"name": "r", "limit": {"rate": 1, "period": "1s"}, "key": "ip:x"`), `rules[1].key[0]: "ip" takes no argument`},
		{"unknown limiter", rule(base + `, "limiter": "magic"`), `rules[1].limiter: "magic" is not hybrid, global or local`},
		{"unknown algorithm", rule(base + `, "limiter": "global", "algorithm": "leaky"`), `rules[1].algorithm: "leaky" is not`},
		{"algorithm needs global", rule(base + `, "algorithm": "fixed-window"`), `rules[1].algorithm: "fixed-window" needs limiter "global"`},
		{"cost above burst", rule(base + `, "cost": 11`), "rules[1].cost: 11 is outside [1, burst 10]"},
		{"bad on_error", rule(base + `, "on_error": "maybe"`), `rules[1].on_error: "maybe" is not open or closed`},
		{"negative fail_retry", rule(base + `, "fail_retry": "-1s"`), "rules[1].fail_retry: must be >= 0"},
		{"bad quota unit", rule(base + `, "quota_unit": "bytes"`), `rules[1].quota_unit: "bytes" is not`},
		{"shadow as string", rule(base + `, "shadow": "yes"`), `rules[1].shadow: want true or false, got "yes"`},
		{"bad exempt ip", rule(base + `, "exempt": {"ips": ["10.0.0.0/8", "nope"]}`), `rules[1].exempt.ips[1]: "nope" is not an address`},
		{"bad exempt path", rule(base + `, "exempt": {"paths": ["healthz"]}`), `rules[1].exempt.paths[0]: "healthz" does not start with /`},
		{"bad exempt method", rule(base + `, "exempt": {"methods": ["GET /"]}`), `rules[1].exempt.methods[0]`},
		{"empty exempt header", rule(base + `, "exempt": {"headers": {"X-A": [""]}}`), `rules[1].exempt.headers.X-A[0]: empty value`},
		{"bad match path", rule(base + `, "match": {"paths": ["/a", "b"]}`), `rules[1].match.paths[1]: "b" does not start with /`},
		{"bad match ip", rule(base + `, "match": {"ips": "x"}`), `rules[1].match.ips[0]: "x" is not an address`},
		{"exempt header as list", rule(base + `, "exempt": {"headers": ["X-A"]}`), `rules[1].exempt.headers: want an object, got a list`},
		{"rules not a list", `{"rules": {"name": "r"}}`, "rules: want a list, got an object"},
		{"rule not an object", `{"rules": [1]}`, "rules[0]: want an object, got 1"},
		{"bad trusted proxy", `{"client_ip": {"trusted_proxies": ["10.0.0.0/33"]}}`, `client_ip.trusted_proxies[0]: "10.0.0.0/33"`},
		{"bad forwarding header", `{"client_ip": {"header": "x-real-ip"}}`, `client_ip.header: "x-real-ip" is not`},
		{"bad ipv6 prefix", `{"client_ip": {"ipv6_prefix": 129}}`, "client_ip.ipv6_prefix: 129 is outside [1, 128]"},
		{"field name with a dot", `{"client_ip": {"a.b": 1}}`, `client_ip["a.b"]: unknown field`},
		{"name as number", rule(`"name": 5, "limit": {"rate": 1, "period": "1s"}, "key": "ip"`), `rules[1].name: want a string, got 5`},
		{"null name", rule(`"name": null, "limit": {"rate": 1, "period": "1s"}, "key": "ip"`), `rules[1].name: want a string, got null`},
		{"rate as float", rule(`"name": "r", "key": "ip", "limit": {"rate": 10.0, "period": "1s"}`), `rules[1].limit.rate: want an integer, got 10.0`},
		{"shadow as on", rule(base + `, "shadow": "on"`), `rules[1].shadow: want true or false, got "on"`},
		{"key as number", rule(`"name": "r", "limit": {"rate": 1, "period": "1s"}, "key": 7`), `rules[1].key: want a string or a list of strings, got 7`},
		{"key part as number", rule(`"name": "r", "limit": {"rate": 1, "period": "1s"}, "key": ["ip", 7]`), `rules[1].key[1]: want a string, got 7`},
		{"period as list", rule(`"name": "r", "key": "ip", "limit": {"rate": 1, "period": [1]}`), `rules[1].limit.period: want a duration such as "1m" or a number of seconds, got a list`},
		{"headers as string", `{"headers": "legacy"}`, `headers: want an object, got "legacy"`},
	}
	for _, tt := range tests {
		for _, f := range []Format{JSON, YAML} {
			_, err := Parse([]byte(tt.json), f)
			var ce *Error
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &ce) || !strings.Contains(err.Error(), "httplimit: config: "+tt.want) {
				t.Errorf("%s (%s): ParseConfig = %v, want a ConfigError containing %q", tt.name, f, err, tt.want)
			}
		}
	}
}

func TestParseConfigSyntax(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		in     string
		want   string
	}{
		{"json syntax", JSON, "{\n  \"rules\": [,]\n}", "json: line 2, column"},
		{"json duplicate", JSON, `{"rules": [], "rules": []}`, `duplicate field "rules"`},
		{"json trailing", JSON, `{} {}`, "data after the top-level value"},
		{"json empty", JSON, ``, "unexpected EOF"},
		{"json truncated", JSON, `{"rules": [`, "unexpected EOF"},
		{"json too deep", JSON, strings.Repeat("[", 40) + strings.Repeat("]", 40), "nested deeper than"},
		{"yaml syntax", YAML, "rules: [\n", "yaml:"},
		{"yaml duplicate", YAML, "rules: []\nrules: []\n", `line 2: duplicate field "rules"`},
		{"yaml two documents", YAML, "rules: []\n---\nrules: []\n", "more than one document"},
		{"yaml empty", YAML, "", "empty document"},
		{"yaml merge key", YAML, "base: &b {rate: 1}\nrules: [{<<: *b}]\n", "only plain field names"},
		{"yaml alias bomb", YAML, aliasBomb(), "more than 100000 values"},
		{"yaml top-level list", YAML, "- 1\n", "want an object, got a list"},
		// Errors name the field and its line, also through an alias.
		{"yaml unknown field's line", YAML, "rules:\n  - name: a\n    limit: {rate: 1, period: 1s}\n    key: ip\n    colour: red\n", "rules[0].colour: unknown field (line 5)"},
		{"yaml mistyped field's line", YAML, "rules:\n  - name: a\n    limit: {rate: x, period: 1s}\n    key: ip\n", `rules[0].limit.rate: want an integer, got "x" (line 3)`},
		{"yaml aliased fraction", YAML, "n: &n 1.5\nrules: []\n", "n: unknown field"},
		{"yaml fraction through an alias", YAML, "rules:\n  - {name: a, limit: {rate: &r 2.5, period: 1s}, key: ip}\n  - {name: b, limit: {rate: *r, period: 1s}, key: ip}\n", "rules[0].limit.rate: want an integer, got 2.5 (line 2)"},
		{"yaml duration's line", YAML, "rules:\n  - name: a\n    limit: {rate: 1, period: soon}\n    key: ip\n", `rules[0].limit.period: want a duration such as "1m" or a number of seconds, got "soon" (line 3)`},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.in), tt.format)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: ParseConfig = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	if _, err := Parse([]byte(`{}`), Format(9)); err == nil {
		t.Errorf("ParseConfig with an unknown format succeeded")
	}
	if _, err := Parse(make([]byte, maxConfigSize+1), JSON); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseConfig of an oversized file = %v", err)
	}
}

// TestConfigDecimalSeconds reads durations written as decimal seconds:
// 1.001 was 1.000999999s, the float's product truncated, so rate 1001 in
// period 1.001 was not 1000 a second.
func TestConfigDecimalSeconds(t *testing.T) {
	for ms := int64(1); ms <= 100_000; ms += 7 {
		in := fmt.Sprintf(`{"rules":[{"name":"a","limit":{"rate":1,"period":%d.%03d},"key":"ip"}]}`, ms/1000, ms%1000)
		c, err := Parse([]byte(in), JSON)
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Duration(c.Rules[0].Limit.Period); got != time.Duration(ms)*time.Millisecond {
			t.Fatalf("period %d.%03d parsed as %v (%d ns)", ms/1000, ms%1000, got, int64(got))
		}
	}
}

// aliasBomb is the "billion laughs" of YAML: nine levels of nine aliases.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func TestLoadConfigFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"c.yaml": configYAML, "c.yml": configYAML, "c.json": configJSON} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadFile(path)
		if err != nil || len(c.Rules) != 3 {
			t.Errorf("LoadConfigFile(%s) = %+v, %v", name, c, err)
		}
	}
	if _, err := LoadFile(filepath.Join(dir, "c.toml")); err == nil {
		t.Error("LoadConfigFile(.toml) succeeded")
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("LoadConfigFile of a missing file succeeded")
	}
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"rules": [{"name": "x"}]}`), 0o600)
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), "bad.json: httplimit: config: rules[0]") {
		t.Errorf("LoadConfigFile(bad.json) = %v, want the path and field", err)
	}
	if c, err := Load(strings.NewReader(configJSON), JSON); err != nil || len(c.Rules) != 3 {
		t.Errorf("LoadConfig = %+v, %v", c, err)
	}
}

// TestConfigMiddleware builds a middleware from the YAML config on a real
// Redis and checks that each setting reaches the rules.
func TestConfigMiddleware(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	c, err := Parse([]byte(configYAML), YAML)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Build(Env{}); err == nil || !strings.Contains(err.Error(), `rules[0].limiter: "hybrid" needs Env.Hybrid`) {
		t.Errorf("Build without a hybrid limiter = %v", err)
	}
	hybrid := answer(allowed(99, time.Minute), nil)
	if _, err := c.Build(Env{Hybrid: hybrid}); err == nil || !strings.Contains(err.Error(), `rules[1].limiter: "global" needs Env.Redis`) {
		t.Errorf("Build without Redis = %v", err)
	}
	m, err := c.Middleware(Env{Hybrid: hybrid, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		kind   string
		shadow bool
	}{{"custom", false}, {"global", true}, {"local", false}}
	for i, rs := range m.Stats().Rules {
		if rs.Limiter != want[i].kind || rs.Shadow != want[i].shadow {
			t.Errorf("rule %d: %+v, want kind %s shadow %v", i, rs, want[i].kind, want[i].shadow)
		}
	}
	built, err := c.Build(Env{Hybrid: hybrid, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	if r := built[1]; r.Limit != (hybridlimit.Limit{Rate: 1000, Period: time.Minute, Burst: 500}) || r.Cost != 2 ||
		r.OnError != hybridlimit.FailClosed || r.FailRetry != 1500*time.Millisecond || !r.Shadow || !r.Settle || r.QuotaUnit != rules.UnitRequests {
		t.Errorf("rules[1] = %+v", r)
	}

	req := func(remote string, hdr ...string) *http.Request {
		q := httptest.NewRequest("GET", "/x", nil)
		q.RemoteAddr = remote
		for i := 0; i+1 < len(hdr); i += 2 {
			q.Header.Set(hdr[i], hdr[i+1])
		}
		return q
	}
	// The per-ip key honours the Forwarded header from a trusted proxy
	// and the /56 mask.
	hybrid.Keys = nil
	if _, err := m.Check(req("10.1.1.1:5", "Forwarded", `for="[2001:db8:aa:bb01::9]:1"`)); err != nil {
		t.Fatal(err)
	}
	if len(hybrid.Keys) != 1 || hybrid.Keys[0] != "per-ip|2001:db8:aa:bb00::/56" {
		t.Errorf("hybrid keys = %q", hybrid.Keys)
	}
	// The per-key rule needs X-Key and is exempt for 192.0.2.0/24 or X-Internal.
	before := m.Stats().Rules[1].Outcomes
	for _, q := range []*http.Request{
		req("198.51.100.1:1", "X-Key", "k"),
		req("192.0.2.5:1", "X-Key", "k"),
		req("198.51.100.1:1", "X-Key", "k", "X-Internal", "s3cret"),
		req("198.51.100.1:1"),
	} {
		if _, err := m.Check(q); err != nil {
			t.Fatal(err)
		}
	}
	// It matches GET and HEAD only.
	post := req("198.51.100.1:1", "X-Key", "k")
	post.Method = "POST"
	if _, err := m.Check(post); err != nil {
		t.Fatal(err)
	}
	after := m.Stats().Rules[1].Outcomes
	if after[rules.OutcomeAllowed]-before[rules.OutcomeAllowed] != 1 || after[rules.OutcomeExempt]-before[rules.OutcomeExempt] != 2 ||
		after[rules.OutcomeNoKey]-before[rules.OutcomeNoKey] != 1 || after[rules.OutcomeSkipped]-before[rules.OutcomeSkipped] != 1 {
		t.Errorf("per-key outcomes went from %v to %v", before, after)
	}
	// The legacy option is on.
	w := httptest.NewRecorder()
	m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, req("198.51.100.1:1"))
	if w.Header().Get(httplimit.HeaderLegacyLimit) == "" {
		t.Errorf("no legacy fields: %v", w.Header())
	}
	if _, err := c.Build(Env{Hybrid: hybrid, Redis: rdb, User: nil}); err != nil {
		t.Errorf("Build = %v", err)
	}
	c.Rules[0].Key = []string{"user"}
	if _, err := c.Build(Env{Hybrid: hybrid, Redis: rdb}); err == nil || !strings.Contains(err.Error(), `rules[0].key[0]: "user" needs Env.User`) {
		t.Errorf("Build with a user key and no Env.User = %v", err)
	}
}

// FuzzParseConfig feeds arbitrary bytes to both parsers: they must not
// panic, must fail with a Error, and what they accept must validate
// and parse the same once more.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(configYAML), true)
	f.Add([]byte(configJSON), false)
	f.Add([]byte(`{"rules": [{"name": "a", "limit": {"rate": 1, "period": 1e300}, "key": "ip"}]}`), false)
	f.Add([]byte("rules:\n  - name: a\n    limit: {rate: 0x10, period: .inf}\n    key: ip\n"), true)
	f.Add([]byte(aliasBomb()), true)
	f.Fuzz(func(t *testing.T, data []byte, yaml bool) {
		format := JSON
		if yaml {
			format = YAML
		}
		c, err := Parse(data, format)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseConfig error %v is not ErrInvalidConfig", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		c2, err := Parse(data, format)
		if err != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("second parse = %+v, %v", c2, err)
		}
	})
}

// TestConfigTrustUnixPeer: client_ip.trust_unix_peer sets
// ClientIP.TrustUnixPeer, so a file-configured per-IP rule behind a proxy
// on a Unix socket applies.
func TestConfigTrustUnixPeer(t *testing.T) {
	for _, v := range []bool{false, true} {
		c, err := Parse([]byte(fmt.Sprintf(`{"client_ip": {"trust_unix_peer": %v}}`, v)), JSON)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.clientIP()
		if err != nil || res.TrustUnixPeer != v {
			t.Errorf("trust_unix_peer %v: ClientIP %+v, %v", v, res, err)
		}
	}
}

// TestConfigEmbeds decodes a RuleConfig list inside an application's own
// config with yaml.v3 and encoding/json, strict: yaml.Unmarshal into
// config.Config failed on "1m" and "ip". Unknown fields are errors with
// KnownFields and DisallowUnknownFields, as in Parse.
func TestConfigEmbeds(t *testing.T) {
	type app struct {
		Listen string `yaml:"listen" json:"listen"`
		Limits Config `yaml:"limits" json:"limits"`
	}
	yamlDoc := "listen: :8080\nlimits:\n  rules:\n    - name: per-ip\n      limit: {rate: 100, period: 1m}\n      key: ip\n      fail_retry: 1.5\n"
	jsonDoc := `{"listen": ":8080", "limits": {"rules": [{"name": "per-ip", "limit": {"rate": 100, "period": "1m"}, "key": "ip", "fail_retry": 1.5}]}}`
	want := RuleConfig{Name: "per-ip", Limit: LimitConfig{Rate: 100, Period: Duration(time.Minute)}, Key: StringList{"ip"},
		FailRetry: Duration(1500 * time.Millisecond)}
	var y app
	dec := yaml.NewDecoder(strings.NewReader(yamlDoc))
	dec.KnownFields(true)
	if err := dec.Decode(&y); err != nil || len(y.Limits.Rules) != 1 || !reflect.DeepEqual(y.Limits.Rules[0], want) {
		t.Errorf("yaml: %+v, %v", y, err)
	}
	var j app
	jd := json.NewDecoder(strings.NewReader(jsonDoc))
	jd.DisallowUnknownFields()
	if err := jd.Decode(&j); err != nil || !reflect.DeepEqual(j, y) {
		t.Errorf("json: %+v, %v", j, err)
	}
	if err := y.Limits.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	var b app
	dec = yaml.NewDecoder(strings.NewReader(strings.Replace(yamlDoc, "rate:", "rte:", 1)))
	dec.KnownFields(true)
	if err := dec.Decode(&b); err == nil || !strings.Contains(err.Error(), "rte") {
		t.Errorf("yaml with an unknown field: %v", err)
	}
	jd = json.NewDecoder(strings.NewReader(strings.Replace(jsonDoc, `"rate"`, `"rte"`, 1)))
	jd.DisallowUnknownFields()
	if err := jd.Decode(&b); err == nil || !strings.Contains(err.Error(), "rte") {
		t.Errorf("json with an unknown field: %v", err)
	}
	// The path of the field, in Parse's errors.
	if _, err := Parse([]byte("rules:\n  - name: a\n    limit: {rate: 1, period: 1s, burts: 2}\n    key: ip\n"), YAML); err == nil ||
		!strings.Contains(err.Error(), "rules[0].limit.burts: unknown field") {
		t.Errorf("ParseConfig = %v, want the path rules[0].limit.burts", err)
	}
	// And back out: a Config marshals to what it reads.
	out, err := yaml.Marshal(y.Limits)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out, YAML)
	if err != nil || !reflect.DeepEqual(back.Rules[0], want) || strings.Contains(string(out), "shadow") {
		t.Errorf("marshalled %s, parsed back %+v, %v", out, back, err)
	}
}

// TestConfigReload swaps a middleware's rules and header options from a
// new config; the local rule's key keeps what it spent.
func TestConfigReload(t *testing.T) {
	loc := newLocal(t)
	env := Env{Local: loc}
	parse := func(doc string) *Config {
		c, err := Parse([]byte(doc), YAML)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	m, err := parse("rules:\n  - {name: a, limiter: local, limit: {rate: 3, period: 1h}, key: static:x}\n").Middleware(env)
	if err != nil {
		t.Fatal(err)
	}
	check := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w
	}
	check()
	check()
	if err := parse("headers: {legacy: true}\nrules:\n  - {name: a, limiter: local, limit: {rate: 3, period: 1h}, key: static:x}\n").Reload(m, env); err != nil {
		t.Fatal(err)
	}
	if w := check(); w.Code != 200 || w.Header().Get(httplimit.HeaderLegacyRemaining) != "0" {
		t.Errorf("third request after the reload: %d, legacy remaining %q; want 200 and 0", w.Code, w.Header().Get(httplimit.HeaderLegacyRemaining))
	}
	if w := check(); w.Code != 429 {
		t.Errorf("fourth request: %d, want 429", w.Code)
	}
	if err := parse("rules:\n  - {name: a, limiter: hybrid, limit: {rate: 3, period: 1h}, key: ip}\n").Reload(m, env); err == nil {
		t.Error("a config needing Env.Hybrid reloaded without one")
	}
}
