package config

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
)

// Format is the syntax of a config file.
type Format int

// The formats. They share one schema, and JSON is also valid YAML.
const (
	JSON Format = iota + 1
	YAML
)

func (f Format) String() string {
	switch f {
	case JSON:
		return "json"
	case YAML:
		return "yaml"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// Config is the file form of a Middleware: options and rules. Its fields
// are named by their yaml and json tags, so a Config (or a RuleConfig)
// embeds in an application's own config and decodes with yaml.v3 or
// encoding/json; turn on yaml.Decoder.KnownFields and
// json.Decoder.DisallowUnknownFields to refuse unknown fields. Parse
// decodes with KnownFields too, refuses the scalars yaml.v3 would convert
// (1.5 for an integer, "yes" for a bool, a number for a string), and names
// the field and line of every error. This YAML shows all of them:
//
//	headers:
//	  legacy: true          # also send X-RateLimit-*
//	  all_policies: false   # report every rule, not only the tightest
//	client_ip:
//	  trusted_proxies: ["10.0.0.0/8", "2001:db8::/32"]
//	  header: x-forwarded-for   # or: forwarded
//	  ipv4_prefix: 32
//	  ipv6_prefix: 64
//	  trust_unix_peer: false    # a peer on a Unix socket is a trusted proxy
//	rules:
//	  - name: per-ip
//	    limit: {rate: 100, period: 1m}  # burst defaults to rate
//	    key: ip
//	  - name: per-key
//	    limiter: global                 # hybrid (default), global or local
//	    algorithm: sliding-window       # global only; default gcra
//	    limit: {rate: 1000, period: 1m, burst: 1000}
//	    key: [api_key:X-API-Key]        # parts joined: [user, route]
//	    cost: 1
//	    shadow: false
//	    settle: false                   # true: cost is an estimate, settled to rules.ReportCost's
//	    on_error: closed                # open (default) or closed
//	    fail_retry: 5s
//	    quota_unit: requests
//	    match:                          # only these requests: all lists must match
//	      methods: [GET, POST]
//	      paths: [/api/]
//	    exempt:                         # never these: any list may match
//	      ips: [192.0.2.0/24]
//	      methods: [OPTIONS]
//	      paths: [/healthz]
//	      headers: {X-Internal: [secret]}
//
// Key parts: ip, api_key (header X-API-Key) or api_key:<header>,
// header:<name>, user (Env.User), route, method, path, and static:<value>
// (one quota for all). Durations are Go duration strings or seconds.
type Config struct {
	Headers  HeadersConfig  `yaml:"headers,omitempty" json:"headers,omitzero"`
	ClientIP ClientIPConfig `yaml:"client_ip,omitempty" json:"client_ip,omitzero"`
	Rules    []RuleConfig   `yaml:"rules" json:"rules"`
}

// HeadersConfig chooses the optional response fields.
type HeadersConfig struct {
	Legacy      bool `yaml:"legacy,omitempty" json:"legacy,omitempty"`             // WithLegacyHeaders
	AllPolicies bool `yaml:"all_policies,omitempty" json:"all_policies,omitempty"` // WithAllPolicies
}

// ClientIPConfig is the file form of ClientIP.
type ClientIPConfig struct {
	TrustedProxies []string `yaml:"trusted_proxies,omitempty" json:"trusted_proxies,omitempty"`
	Header         string   `yaml:"header,omitempty" json:"header,omitempty"` // "x-forwarded-for" (default) or "forwarded"
	IPv4Prefix     int      `yaml:"ipv4_prefix,omitempty" json:"ipv4_prefix,omitempty"`
	IPv6Prefix     int      `yaml:"ipv6_prefix,omitempty" json:"ipv6_prefix,omitempty"`
	TrustUnixPeer  bool     `yaml:"trust_unix_peer,omitempty" json:"trust_unix_peer,omitempty"`
}

// RuleConfig is the file form of a Rule.
type RuleConfig struct {
	Name      string      `yaml:"name" json:"name"`
	Limiter   string      `yaml:"limiter,omitempty" json:"limiter,omitempty"`     // "hybrid" (default), "global", "local"
	Algorithm string      `yaml:"algorithm,omitempty" json:"algorithm,omitempty"` // global: gcra (default), token-bucket, fixed-window, sliding-window, sliding-log
	Limit     LimitConfig `yaml:"limit" json:"limit"`
	Key       StringList  `yaml:"key" json:"key"`
	Cost      int64       `yaml:"cost,omitempty" json:"cost,omitempty"`
	Shadow    bool        `yaml:"shadow,omitempty" json:"shadow,omitempty"`
	Settle    bool        `yaml:"settle,omitempty" json:"settle,omitempty"`     // cost is an estimate the handler settles (rules.ReportCost)
	OnError   string      `yaml:"on_error,omitempty" json:"on_error,omitempty"` // "open" (default) or "closed"
	FailRetry Duration    `yaml:"fail_retry,omitempty" json:"fail_retry,omitempty"`
	QuotaUnit string      `yaml:"quota_unit,omitempty" json:"quota_unit,omitempty"`
	Match     MatchConfig `yaml:"match,omitempty" json:"match,omitzero"`
	Exempt    MatchConfig `yaml:"exempt,omitempty" json:"exempt,omitzero"`
}

// LimitConfig is the file form of a hybridlimit.Limit. Burst 0 means Rate.
type LimitConfig struct {
	Rate   int64    `yaml:"rate" json:"rate"`
	Period Duration `yaml:"period" json:"period"`
	Burst  int64    `yaml:"burst,omitempty" json:"burst,omitempty"`
}

// MatchConfig describes requests by client address or prefix (as
// client_ip resolves it), method, path prefix and header value. Under
// "match" a request must satisfy every list given (GET and under /search);
// under "exempt" any one of them (from 10.0.0.0/8, or under /healthz).
type MatchConfig struct {
	IPs     StringList            `yaml:"ips,omitempty" json:"ips,omitempty"`
	Methods StringList            `yaml:"methods,omitempty" json:"methods,omitempty"`
	Paths   StringList            `yaml:"paths,omitempty" json:"paths,omitempty"`
	Headers map[string]StringList `yaml:"headers,omitempty" json:"headers,omitzero"`
}

// ErrInvalid is wrapped by every error about a config's content.
var ErrInvalid = errors.New("httplimit: invalid config")

// Error is an error in a config, at the field that Path names, such
// as "rules[1].limit.period"; Path is empty for a syntax error.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "httplimit: config: " + e.Err.Error()
	}
	return "httplimit: config: " + e.Path + ": " + e.Err.Error()
}

// Unwrap returns ErrInvalid and the underlying error.
func (e *Error) Unwrap() []error { return []error{ErrInvalid, e.Err} }

func pathError(path string, err error) error { return &Error{Path: path, Err: err} }

// maxConfigSize bounds a config file.
const maxConfigSize = 1 << 20

// Parse parses and validates a config in the given format. Unknown
// and duplicate fields are errors, as are values of the wrong type; every
// error is a *Error naming the field.
func Parse(data []byte, format Format) (*Config, error) {
	if len(data) > maxConfigSize {
		return nil, pathError("", fmt.Errorf("%d bytes, more than %d", len(data), maxConfigSize))
	}
	if format != JSON && format != YAML {
		return nil, fmt.Errorf("httplimit: unknown config format %d", int(format))
	}
	var c Config
	if err := decodeConfig(data, format, &c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Load reads a config from r (at most 1 MiB) and parses it.
func Load(r io.Reader, format Format) (*Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("httplimit: read config: %w", err)
	}
	return Parse(data, format)
}

// LoadFile reads and parses a config file, its format told by its
// extension: .json, or .yaml or .yml.
func LoadFile(path string) (*Config, error) {
	var f Format
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		f = JSON
	case ".yaml", ".yml":
		f = YAML
	default:
		return nil, fmt.Errorf("httplimit: config %s: extension is not .json, .yaml or .yml", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	c, err := Parse(data, f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate checks what the file can get wrong without a limiter at hand,
// and returns a *Error naming the first invalid field.
func (c *Config) Validate() error {
	if _, err := c.clientIP(); err != nil {
		return err
	}
	seen := map[string]int{}
	for i := range c.Rules {
		r := &c.Rules[i]
		p := fmt.Sprintf("rules[%d]", i)
		if err := rules.CheckName(r.Name); err != nil {
			return pathError(p+".name", err)
		}
		if j, dup := seen[r.Name]; dup {
			return pathError(p+".name", fmt.Errorf("%q is also the name of rules[%d]", r.Name, j))
		}
		seen[r.Name] = i
		if _, err := r.kind(p); err != nil {
			return err
		}
		if _, err := r.limit(p); err != nil {
			return err
		}
		if len(r.Key) == 0 {
			return pathError(p+".key", errors.New("required"))
		}
		for j, part := range r.Key {
			if err := checkKeyPart(part); err != nil {
				return pathError(fmt.Sprintf("%s.key[%d]", p, j), err)
			}
		}
		if r.Cost < 0 || r.Cost > r.burst() {
			return pathError(p+".cost", fmt.Errorf("%d is outside [1, burst %d]", r.Cost, r.burst()))
		}
		if _, err := failurePolicy(r.OnError, p); err != nil {
			return err
		}
		if r.FailRetry < 0 {
			return pathError(p+".fail_retry", errors.New("must be >= 0"))
		}
		switch r.QuotaUnit {
		case "", rules.UnitRequests, rules.UnitContentBytes, rules.UnitConcurrentRequests:
		default:
			return pathError(p+".quota_unit", fmt.Errorf("%q is not %s, %s or %s", r.QuotaUnit, rules.UnitRequests, rules.UnitContentBytes, rules.UnitConcurrentRequests))
		}
		if _, err := r.Match.predicate(p+".match", nil, rules.AllOf[*http.Request]); err != nil {
			return err
		}
		if _, err := r.Exempt.predicate(p+".exempt", nil, rules.AnyOf[*http.Request]); err != nil {
			return err
		}
	}
	return nil
}

func (r *RuleConfig) burst() int64 {
	if r.Limit.Burst == 0 {
		return r.Limit.Rate
	}
	return r.Limit.Burst
}

// kind returns the rule's limiter kind and global algorithm.
func (r *RuleConfig) kind(p string) (global.Algorithm, error) {
	switch r.Limiter {
	case "", "hybrid", "local":
		if r.Algorithm != "" && r.Algorithm != "token-bucket" {
			return 0, pathError(p+".algorithm", fmt.Errorf("%q needs limiter \"global\"; %s limiters are token buckets", r.Algorithm, r.limiterName()))
		}
		return 0, nil
	case "global":
		if r.Algorithm == "" {
			return global.GCRA, nil
		}
		for a := global.TokenBucket; a <= global.SlidingLog; a++ {
			if a.String() == r.Algorithm {
				return a, nil
			}
		}
		return 0, pathError(p+".algorithm", fmt.Errorf("%q is not gcra, token-bucket, fixed-window, sliding-window or sliding-log", r.Algorithm))
	}
	return 0, pathError(p+".limiter", fmt.Errorf("%q is not hybrid, global or local", r.Limiter))
}

func (r *RuleConfig) limiterName() string {
	if r.Limiter == "" {
		return "hybrid"
	}
	return r.Limiter
}

func (r *RuleConfig) limit(p string) (hybridlimit.Limit, error) {
	l := hybridlimit.Limit{Rate: r.Limit.Rate, Period: time.Duration(r.Limit.Period), Burst: r.burst()}
	switch {
	case l.Rate < 1 || l.Rate > hybridlimit.MaxQuantity:
		return l, pathError(p+".limit.rate", fmt.Errorf("must be in [1, %d]", int64(hybridlimit.MaxQuantity)))
	case l.Period <= 0:
		return l, pathError(p+".limit.period", errors.New("must be > 0"))
	case l.Period < hybridlimit.MinPeriod || l.Period > hybridlimit.MaxRefill:
		return l, pathError(p+".limit.period", fmt.Errorf("%v is outside [%v, %v]", l.Period, hybridlimit.MinPeriod, hybridlimit.MaxRefill))
	case r.Limit.Burst < 0 || l.Burst > hybridlimit.MaxQuantity:
		return l, pathError(p+".limit.burst", fmt.Errorf("must be in [1, %d], or 0 for the rate", int64(hybridlimit.MaxQuantity)))
	}
	if err := l.Validate(); err != nil {
		return l, pathError(p+".limit", err)
	}
	return l, nil
}

func failurePolicy(s, p string) (hybridlimit.FailurePolicy, error) {
	switch s {
	case "", "open":
		return hybridlimit.FailOpen, nil
	case "closed":
		return hybridlimit.FailClosed, nil
	}
	return 0, pathError(p+".on_error", fmt.Errorf("%q is not open or closed", s))
}

func checkKeyPart(part string) error {
	kind, arg, hasArg := strings.Cut(part, ":")
	switch kind {
	case "ip", "user", "route", "method", "path":
		if hasArg {
			return fmt.Errorf("%q takes no argument", kind)
		}
	case "api_key":
		if hasArg && arg == "" {
			return errors.New(`"api_key:" needs a header name`)
		}
	case "header", "static":
		if arg == "" {
			return fmt.Errorf("%q needs an argument, as in %s:X-Tenant", kind, kind)
		}
	default:
		return fmt.Errorf("unknown key part %q; want ip, api_key[:header], header:<name>, user, route, method, path or static:<value>", part)
	}
	return nil
}

// clientIP returns the ClientIP the config describes.
func (c *Config) clientIP() (*httplimit.ClientIP, error) {
	ps, err := httplimit.ParsePrefixes(c.ClientIP.TrustedProxies...)
	if err != nil {
		for i, s := range c.ClientIP.TrustedProxies {
			if _, e := httplimit.ParsePrefixes(s); e != nil {
				return nil, pathError(fmt.Sprintf("client_ip.trusted_proxies[%d]", i), fmt.Errorf("%q is not an address or CIDR prefix", s))
			}
		}
	}
	res := &httplimit.ClientIP{TrustedProxies: ps, IPv4Prefix: c.ClientIP.IPv4Prefix, IPv6Prefix: c.ClientIP.IPv6Prefix,
		TrustUnixPeer: c.ClientIP.TrustUnixPeer}
	switch strings.ToLower(c.ClientIP.Header) {
	case "", "x-forwarded-for":
		res.Header = httplimit.XForwardedFor
	case "forwarded":
		res.Header = httplimit.Forwarded
	default:
		return nil, pathError("client_ip.header", fmt.Errorf("%q is not x-forwarded-for or forwarded", c.ClientIP.Header))
	}
	if res.IPv4Prefix < 0 || res.IPv4Prefix > 32 {
		return nil, pathError("client_ip.ipv4_prefix", fmt.Errorf("%d is outside [1, 32]", res.IPv4Prefix))
	}
	if res.IPv6Prefix < 0 || res.IPv6Prefix > 128 {
		return nil, pathError("client_ip.ipv6_prefix", fmt.Errorf("%d is outside [1, 128]", res.IPv6Prefix))
	}
	return res, nil
}

// predicate returns the function m describes, combined with combine
// (AnyOf or AllOf), or nil if m is empty; p is m's path.
func (m *MatchConfig) predicate(p string, res *httplimit.ClientIP, combine func(...func(*http.Request) bool) func(*http.Request) bool) (func(*http.Request) bool, error) {
	var fns []func(*http.Request) bool
	if len(m.IPs) > 0 {
		ps, err := httplimit.ParsePrefixes(m.IPs...)
		if err != nil {
			for i, s := range m.IPs {
				if _, e := httplimit.ParsePrefixes(s); e != nil {
					return nil, pathError(fmt.Sprintf("%s.ips[%d]", p, i), fmt.Errorf("%q is not an address or CIDR prefix", s))
				}
			}
		}
		fns = append(fns, httplimit.ClientPrefixes(res, ps...))
	}
	if len(m.Methods) > 0 {
		for i, meth := range m.Methods {
			if meth == "" || strings.ContainsAny(meth, " \t/") {
				return nil, pathError(fmt.Sprintf("%s.methods[%d]", p, i), fmt.Errorf("%q is not a method", meth))
			}
		}
		fns = append(fns, httplimit.Methods(m.Methods...))
	}
	if len(m.Paths) > 0 {
		for i, s := range m.Paths {
			if !strings.HasPrefix(s, "/") {
				return nil, pathError(fmt.Sprintf("%s.paths[%d]", p, i), fmt.Errorf("%q does not start with /", s))
			}
		}
		fns = append(fns, httplimit.PathPrefixes(m.Paths...))
	}
	names := make([]string, 0, len(m.Headers))
	for name := range m.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		values := m.Headers[name]
		if name == "" || strings.ContainsAny(name, " \t:") {
			return nil, pathError(join(p+".headers", name), fmt.Errorf("%q is not a header name", name))
		}
		for i, v := range values {
			if v == "" {
				return nil, pathError(fmt.Sprintf("%s[%d]", join(p+".headers", name), i), errors.New("empty value"))
			}
		}
		fns = append(fns, httplimit.HeaderValues(name, values...))
	}
	if len(fns) == 0 {
		return nil, nil
	}
	return combine(fns...), nil
}

// Env holds what a Config refers to but cannot contain: the limiters and
// the user identity.
type Env struct {
	// Hybrid decides rules with limiter "hybrid" (the default), usually a
	// started *sync.Limiter shared by all of them.
	Hybrid hybridlimit.Limiter
	// Redis is where rules with limiter "global" keep their state; one
	// global.Limiter is made per algorithm, with GlobalOptions.
	Redis         hybridlimit.Redis
	GlobalOptions []global.Option
	// Local decides rules with limiter "local". If nil, one local.Table
	// is made for them all.
	Local hybridlimit.Limiter
	// User finds the authenticated user, for the key part "user".
	User httplimit.KeyFunc
}

// Build builds the rules the config describes on the limiters of env. Its
// errors name the field, as Validate's do.
func (c *Config) Build(env Env) ([]httplimit.Rule, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	res, _ := c.clientIP() // validated
	globals := map[global.Algorithm]*global.Limiter{}
	out := make([]httplimit.Rule, len(c.Rules))
	for i := range c.Rules {
		rc := &c.Rules[i]
		p := fmt.Sprintf("rules[%d]", i)
		alg, _ := rc.kind(p)
		lim, _ := rc.limit(p)
		pol, _ := failurePolicy(rc.OnError, p)
		match, _ := rc.Match.predicate(p+".match", res, rules.AllOf[*http.Request])
		ex, _ := rc.Exempt.predicate(p+".exempt", res, rules.AnyOf[*http.Request])
		r := httplimit.Rule{
			Name: rc.Name, Limit: lim, Cost: rc.Cost, Shadow: rc.Shadow, Settle: rc.Settle, Match: match, Exempt: ex,
			OnError: pol, FailRetry: time.Duration(rc.FailRetry), QuotaUnit: rc.QuotaUnit,
		}
		switch rc.Limiter {
		case "", "hybrid":
			if env.Hybrid == nil {
				return nil, pathError(p+".limiter", errors.New(`"hybrid" needs Env.Hybrid`))
			}
			r.Limiter = env.Hybrid
		case "local":
			if env.Local == nil {
				t, err := local.NewTable()
				if err != nil {
					return nil, err
				}
				if env.Local, err = rules.NewLocal(t); err != nil {
					return nil, err
				}
			}
			r.Limiter = env.Local
		case "global":
			if env.Redis == nil {
				return nil, pathError(p+".limiter", errors.New(`"global" needs Env.Redis`))
			}
			g := globals[alg]
			if g == nil {
				var err error
				if g, err = global.New(env.Redis, alg, env.GlobalOptions...); err != nil {
					return nil, pathError(p+".limiter", err)
				}
				globals[alg] = g
			}
			r.Limiter = g
		}
		parts := make([]func(*http.Request) (string, bool), len(rc.Key))
		for j, part := range rc.Key {
			kind, arg, _ := strings.Cut(part, ":")
			switch kind {
			case "ip":
				parts[j] = httplimit.IP(res)
			case "api_key":
				if arg == "" {
					arg = "X-API-Key"
				}
				parts[j] = httplimit.APIKey(arg)
			case "header":
				parts[j] = httplimit.Header(arg)
			case "user":
				if env.User == nil {
					return nil, pathError(fmt.Sprintf("%s.key[%d]", p, j), errors.New(`"user" needs Env.User`))
				}
				parts[j] = env.User
			case "route":
				parts[j] = httplimit.Route()
			case "method":
				parts[j] = httplimit.Method()
			case "path":
				parts[j] = httplimit.Path()
			case "static":
				parts[j] = httplimit.Static(arg)
			}
		}
		r.Key = parts[0]
		if len(parts) > 1 {
			r.Key = rules.Join(parts...)
		}
		out[i] = r
	}
	return out, nil
}

// Options returns the middleware options the config's headers section sets.
func (c *Config) Options() []httplimit.Option {
	var opts []httplimit.Option
	if c.Headers.Legacy {
		opts = append(opts, httplimit.WithLegacyHeaders())
	}
	if c.Headers.AllPolicies {
		opts = append(opts, httplimit.WithAllPolicies())
	}
	return opts
}

// Middleware builds the rules on env's limiters and returns a Middleware
// enforcing them, with the config's options followed by opts.
func (c *Config) Middleware(env Env, opts ...httplimit.Option) (*httplimit.Middleware, error) {
	rules, err := c.Build(env)
	if err != nil {
		return nil, err
	}
	return httplimit.New(rules, append(c.Options(), opts...)...)
}

// Reload makes m enforce the config, atomically, as Middleware.Reload
// does: the rules it describes on env's limiters and its headers section.
// An invalid config changes nothing. The limiters keep their state, so a
// rule that keeps its name keeps its keys' quotas. Reload a file with
//
//	cfg, err := config.LoadFile(path)
//	if err == nil {
//		err = cfg.Reload(mw, env)
//	}
//
// on SIGHUP or when the file changes. The limiters in env must be the
// ones the middleware was built on, or keys start afresh: rules on Redis
// (Env.Hybrid, Env.Redis with the same GlobalOptions) find their state
// there, and rules with limiter "local" keep theirs only if Env.Local is
// set, since a Build without it makes a new table.
func (c *Config) Reload(m *httplimit.Middleware, env Env) error {
	rules, err := c.Build(env)
	if err != nil {
		return err
	}
	if err := m.Reload(rules); err != nil {
		return err
	}
	m.SetFields(c.Headers.Legacy, c.Headers.AllPolicies)
	return nil
}
