package rls

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// Mode is how rules are counted.
type Mode int

const (
	// ModeHybrid (the default) serves each rule as a token bucket of
	// requests_per_unit per unit, burst requests_per_unit, on the hybrid
	// limiter: local allowance reconciled with Redis in batches.
	ModeHybrid Mode = iota
	// ModeFixedWindow counts fixed windows aligned to the Unix epoch with
	// one Redis call per request, as the reference service does, and
	// answers with its numbers.
	ModeFixedWindow
)

func (m Mode) String() string {
	if m == ModeFixedWindow {
		return "fixed_window"
	}
	return "hybrid"
}

// RedisSettings say how to reach one Redis deployment, as the REDIS_*
// variables (or REDIS_PERSECOND_*) spell it.
type RedisSettings struct {
	SocketType string // tcp or unix
	Type       string // single, cluster or sentinel (any case)
	// URL is host:port or a socket path; for a cluster, seed nodes
	// separated by commas; for sentinel, the master's name then the
	// sentinels, separated by commas. redis:// and rediss:// URLs work too.
	URL          string
	PoolSize     int
	Auth         string // password, or user:password
	SentinelAuth string
	TLS          bool
	Timeout      time.Duration
}

// Settings is the whole configuration of the service, read from the
// environment by FromEnv.
type Settings struct {
	Host, DebugHost, GRPCHost string
	Port, DebugPort, GRPCPort int
	GRPCUDS                   string
	GRPCMaxConnAge            time.Duration
	GRPCMaxConnAgeGrace       time.Duration
	GRPCTLSCert, GRPCTLSKey   string
	GRPCClientCA              string
	// GRPCClientSAN is the name a client's certificate must carry
	// (GRPC_CLIENT_TLS_SAN).
	GRPCClientSAN string

	LogLevel, LogFormat string

	Runtime Runtime

	Redis          RedisSettings
	RedisPerSecond *RedisSettings // nil unless REDIS_PERSECOND=true
	TLSClientCert  string
	TLSClientKey   string
	TLSCACert      string
	TLSSkipVerify  bool
	// RedisHealth makes /healthcheck fail while Redis does not answer
	// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
	RedisHealth bool

	CacheKeyPrefix   string
	NearLimitRatio   float32
	ExpirationJitter time.Duration
	// StopIncrementWhenOver stops a fixed-window count at the limit, as
	// for the reference. (The hybrid mode counts no hit over a limit
	// unless CountEveryHit.)
	StopIncrementWhenOver bool

	GlobalShadow, GlobalQuota bool
	Headers                   bool
	LimitHeader               string
	RemainingHeader           string
	ResetHeader               string
	HealthyWithConfig         bool
	// ForceStart makes the service healthy before its first config loads
	// (FORCE_START_WITHOUT_INITIAL_CONFIG): calls fail until then, as the
	// reference's do.
	ForceStart bool

	// ConfigType is where the rules come from: ConfigFile, the runtime
	// directory (the default), or ConfigXDS, an xDS management server.
	ConfigType string
	XDS        XDS

	Prometheus     bool
	PrometheusAddr string
	PrometheusPath string
	// PrometheusMapperYAML is a statsd_exporter mapping file that names the
	// reference's stats in Prometheus; "" uses the reference's default
	// mapping (DefaultMetricMapping).
	PrometheusMapperYAML string
	// PrometheusResponseTimeMS leaves the default mapping's response time
	// in milliseconds (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS).
	PrometheusResponseTimeMS bool
	ExtraTags                map[string]string

	Tracing Tracing

	// Our own settings, HYBRIDLIMIT_*.
	Mode         Mode
	Optimistic   bool
	SyncInterval time.Duration
	MaxWait      time.Duration
	// Policy is what a decision does when Redis cannot be asked in time:
	// FallbackLocal enforces on each replica its share of each limit among
	// the live replicas last seen, starting from what the replica last
	// heard of the key, and Redis takes what it admitted once it answers
	// (hybrid mode only); FailOpen admits; FailClosed denies; FailError
	// answers the call with gRPC UNAVAILABLE, for Envoy's
	// failure_mode_deny to decide (in hybrid mode: the denials of the
	// limiter's FailClosed).
	Policy hybridlimit.FailurePolicy
	// CountEveryHit counts every hit as the reference does, in hybrid
	// mode too: a request's plain hits over a descriptor's limit are
	// charged, its bucket going into debt, as costs (hits set on the
	// descriptor) always are, and every descriptor of a request spends,
	// none given back. For usage sent as plain hits (Envoy's filter state
	// envoy.ratelimit.hits_addend).
	CountEveryHit bool
	InstanceID    string
	ConfigPoll    time.Duration
	MaxStatKeys   int
	EmbeddedRedis bool

	// Notes are what FromEnv has to say about variables it read: those
	// with no effect here, our own it does not know. The caller logs
	// them once.
	Notes []string
}

// The values of CONFIG_TYPE.
const (
	ConfigFile = "FILE"
	ConfigXDS  = "GRPC_XDS_SOTW"
)

// XDS says how to reach the xDS management server the rules come from with
// CONFIG_TYPE=GRPC_XDS_SOTW: the Aggregated Discovery Service, state of the
// world, one RateLimitConfig resource per domain (the CONFIG_GRPC_XDS_* and
// XDS_CLIENT_* variables, with the reference's defaults).
type XDS struct {
	ServerURL string // host:port
	NodeID    string
	// NodeMetadata goes into the node's metadata as strings: "k=v,k2=v2".
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on the stream: "k:v,k2:v2".
	Headers map[string]string
	// ConnectRetry is the wait between attempts to connect while the
	// server cannot be reached.
	ConnectRetry time.Duration
	// Backoff is the wait before a new stream once one has ended, and
	// before a version rejected once is rejected again.
	Backoff Backoff
	// MaxMsgSize bounds a response's size (0: gRPC's 4 MiB).
	MaxMsgSize int
	// TLS, when set, dials with TLS: ClientCert and ClientKey are the
	// client's certificate (mutual TLS), ServerCA the CA that signs the
	// server's, ServerSAN the name to check in it instead of the host's.
	TLS                                        bool
	ClientCert, ClientKey, ServerCA, ServerSAN string
}

// Backoff is an exponential backoff: Initial, doubled after each failure up
// to Max; with Jitter each wait is drawn within RandomFactor of it
// (0.5: between half and one and a half times).
type Backoff struct {
	Initial, Max time.Duration
	RandomFactor float64
	Jitter       bool
}

// Prefix starts the names of our own environment variables.
const Prefix = "HYBRIDLIMIT_"

// moot are the reference's variables whose job this service does another
// way, or not at all: accepted, and named once in the log.
var moot = map[string]string{
	"REDIS_PIPELINE_WINDOW":                        "decisions are batched by the hybrid limiter, not by a write window",
	"REDIS_PIPELINE_LIMIT":                         "decisions are batched by the hybrid limiter",
	"REDIS_PERSECOND_PIPELINE_WINDOW":              "decisions are batched by the hybrid limiter",
	"REDIS_PERSECOND_PIPELINE_LIMIT":               "decisions are batched by the hybrid limiter",
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":                 "a call waits for a connection at most HYBRIDLIMIT_MAX_WAIT",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR":       "a call waits for a connection at most HYBRIDLIMIT_MAX_WAIT",
	"REDIS_CLUSTER_PIPELINE_PARALLELISM":           "cluster pipelines are sent to every node at once",
	"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM": "cluster pipelines are sent to every node at once",
	"REDIS_STARTUP_INITIAL_INTERVAL":               "start-up never waits for Redis: the health check says when it answers",
	"REDIS_STARTUP_MAX_INTERVAL":                   "start-up never waits for Redis",
	"REDIS_STARTUP_MAX_ELAPSED_TIME":               "start-up never waits for Redis",
	"LOCAL_CACHE_SIZE_IN_BYTES":                    "every decision is local already; no cache of over-limit keys is kept",
	"RUNTIME_WATCH_ROOT":                           "every change under the runtime directory reloads, a symbolic link swap included",
	"USE_STATSD":                                   "metrics are served for Prometheus (DEBUG_PORT /metrics, or PROMETHEUS_ADDR), not sent to statsd",
	"STATSD_HOST":                                  "metrics are not sent to statsd",
	"STATSD_PORT":                                  "metrics are not sent to statsd",
	"STATS_FLUSH_INTERVAL":                         "Prometheus scrapes counters as they are",
	"DISABLE_STATS":                                "counters cost nothing until scraped",
	"RESPONSE_DYNAMIC_METADATA":                    "dynamic metadata is not supported",
}

// refused are variables whose values this service cannot honour: set to
// anything but their default they stop it from starting, rather than be
// ignored.
var refused = map[string]string{
	"BACKEND_TYPE":   "redis",
	"USE_DOG_STATSD": "false",
}

// ours are the HYBRIDLIMIT_* variables FromEnv reads.
var ours = []string{"MODE", "RECONCILE", "SYNC_INTERVAL", "MAX_WAIT", "FAILURE_POLICY", "INSTANCE_ID",
	"CONFIG_POLL_INTERVAL", "MAX_STAT_KEYS", "EMBEDDED_REDIS", "COUNT_EVERY_HIT"}

// FromEnv reads the settings from the environment through lookup (such as
// os.LookupEnv), with the reference service's defaults for its variables.
// environ lists every variable set (os.Environ()), for the notes on
// variables that have no effect here. Each bad value is named in the
// error.
func FromEnv(lookup func(string) (string, bool), environ []string) (Settings, error) {
	e := envReader{lookup: lookup}
	s := Settings{
		Host: e.str("HOST", "0.0.0.0"), Port: e.int("PORT", 8080),
		DebugHost: e.str("DEBUG_HOST", "0.0.0.0"), DebugPort: e.int("DEBUG_PORT", 6070),
		GRPCHost: e.str("GRPC_HOST", "0.0.0.0"), GRPCPort: e.int("GRPC_PORT", 8081),
		GRPCUDS:                  e.str("GRPC_UDS", ""),
		GRPCMaxConnAge:           e.dur("GRPC_MAX_CONNECTION_AGE", 24*time.Hour),
		GRPCMaxConnAgeGrace:      e.dur("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour),
		LogLevel:                 e.str("LOG_LEVEL", "WARN"),
		LogFormat:                e.str("LOG_FORMAT", "text"),
		Redis:                    e.redis("REDIS_", "/var/run/nutcracker/ratelimit.sock"),
		TLSClientCert:            e.str("REDIS_TLS_CLIENT_CERT", ""),
		TLSClientKey:             e.str("REDIS_TLS_CLIENT_KEY", ""),
		TLSCACert:                e.str("REDIS_TLS_CACERT", ""),
		TLSSkipVerify:            e.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false),
		RedisHealth:              e.bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false),
		CacheKeyPrefix:           e.str("CACHE_KEY_PREFIX", ""),
		NearLimitRatio:           e.ratio("NEAR_LIMIT_RATIO", 0.8),
		ExpirationJitter:         time.Duration(e.int("EXPIRATION_JITTER_MAX_SECONDS", 300)) * time.Second,
		GlobalShadow:             e.bool("SHADOW_MODE", false),
		GlobalQuota:              e.bool("QUOTA_MODE", false),
		Headers:                  e.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false),
		LimitHeader:              e.str("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
		RemainingHeader:          e.str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
		ResetHeader:              e.str("LIMIT_RESET_HEADER", "RateLimit-Reset"),
		HealthyWithConfig:        e.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false),
		ForceStart:               e.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false),
		Prometheus:               e.bool("USE_PROMETHEUS", false),
		PrometheusAddr:           e.str("PROMETHEUS_ADDR", ":9090"),
		PrometheusPath:           e.str("PROMETHEUS_PATH", "/metrics"),
		PrometheusMapperYAML:     e.str("PROMETHEUS_MAPPER_YAML", ""),
		PrometheusResponseTimeMS: e.bool("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false),
		ExtraTags:                e.pairs("EXTRA_TAGS", ":"),

		Optimistic:    e.choice(Prefix+"RECONCILE", "reserve", "reserve", "optimistic") == "optimistic",
		SyncInterval:  e.dur(Prefix+"SYNC_INTERVAL", 250*time.Millisecond),
		MaxWait:       e.dur(Prefix+"MAX_WAIT", 10*time.Millisecond),
		InstanceID:    e.str(Prefix+"INSTANCE_ID", ""),
		ConfigPoll:    e.dur(Prefix+"CONFIG_POLL_INTERVAL", 30*time.Second),
		MaxStatKeys:   e.int(Prefix+"MAX_STAT_KEYS", 1000),
		EmbeddedRedis: e.bool(Prefix+"EMBEDDED_REDIS", false),
		CountEveryHit: e.bool(Prefix+"COUNT_EVERY_HIT", false),
	}
	s.StopIncrementWhenOver = e.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)
	if e.bool("GRPC_SERVER_USE_TLS", false) {
		s.GRPCTLSCert, s.GRPCTLSKey = e.str("GRPC_SERVER_TLS_CERT", ""), e.str("GRPC_SERVER_TLS_KEY", "")
		s.GRPCClientCA = e.str("GRPC_CLIENT_TLS_CACERT", "")
		s.GRPCClientSAN = e.str("GRPC_CLIENT_TLS_SAN", "")
		if s.GRPCTLSCert == "" || s.GRPCTLSKey == "" {
			e.fail("GRPC_SERVER_USE_TLS", "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
	}
	if san, ok := e.lookup("GRPC_CLIENT_TLS_SAN"); ok && san != "" && s.GRPCClientCA == "" {
		e.fail("GRPC_CLIENT_TLS_SAN", "needs GRPC_SERVER_USE_TLS=true and GRPC_CLIENT_TLS_CACERT: client certificates are asked for only with a CA to check them")
	}
	s.Tracing = Tracing{
		Enabled:      e.bool("TRACING_ENABLED", false),
		Protocol:     e.choice("TRACING_EXPORTER_PROTOCOL", "http", "http", "grpc"),
		ServiceName:  e.str("TRACING_SERVICE_NAME", "RateLimit"),
		Namespace:    e.str("TRACING_SERVICE_NAMESPACE", ""),
		InstanceID:   e.str("TRACING_SERVICE_INSTANCE_ID", ""),
		SamplingRate: parse(&e, "TRACING_SAMPLING_RATE", 1.0, "a number in [0, 1]", unitFloat),
	}
	switch t := strings.ToUpper(strings.TrimSpace(e.str("CONFIG_TYPE", ConfigFile))); t {
	case ConfigFile, "":
		s.ConfigType = ConfigFile
	case ConfigXDS:
		s.ConfigType = ConfigXDS
		s.XDS = e.xds()
	default:
		e.fail("CONFIG_TYPE", fmt.Sprintf("%q: want %s or %s", t, ConfigFile, ConfigXDS))
	}
	root := e.str("RUNTIME_ROOT", "/srv/runtime_data/current")
	s.Runtime = Runtime{
		Root:           root,
		Dir:            filepath.Join(root, e.str("RUNTIME_SUBDIRECTORY", ""), e.str("RUNTIME_APPDIRECTORY", "config")),
		IgnoreDotFiles: e.bool("RUNTIME_IGNOREDOTFILES", false),
		Merge:          e.bool("MERGE_DOMAIN_CONFIG", false),
	}
	if e.bool("REDIS_PERSECOND", false) {
		ps := e.redis("REDIS_PERSECOND_", "/var/run/nutcracker/ratelimitpersecond.sock")
		s.RedisPerSecond = &ps
	}
	switch e.choice(Prefix+"MODE", "hybrid", "hybrid", "fixed_window") {
	case "fixed_window":
		s.Mode = ModeFixedWindow
	}
	def := "fallback-local"
	if s.Mode == ModeFixedWindow {
		def = "error"
	}
	switch e.choice(Prefix+"FAILURE_POLICY", def, "fallback-local", "fail-open", "fail-closed", "error") {
	case "fail-open":
		s.Policy = hybridlimit.FailOpen
	case "fail-closed":
		s.Policy = hybridlimit.FailClosed
	case "error":
		s.Policy = hybridlimit.FailError
	}
	if s.Mode == ModeFixedWindow && s.Policy == hybridlimit.FallbackLocal {
		e.fail(Prefix+"FAILURE_POLICY", "fallback-local needs the hybrid mode; fixed_window takes error, fail-open or fail-closed")
	}
	if s.Mode == ModeFixedWindow && s.CountEveryHit {
		e.fail(Prefix+"COUNT_EVERY_HIT", "is for the hybrid mode; fixed_window counts every hit already")
	}
	if s.MaxWait <= 0 || s.MaxWait > time.Minute {
		e.fail(Prefix+"MAX_WAIT", fmt.Sprintf("%v is outside (0, 1m]", s.MaxWait))
	}
	if s.MaxStatKeys < 1 {
		e.fail(Prefix+"MAX_STAT_KEYS", "must be at least 1")
	}
	if s.ConfigPoll < 0 {
		e.fail(Prefix+"CONFIG_POLL_INTERVAL", "must not be negative (0 turns polling off)")
	}
	switch strings.ToLower(s.LogFormat) {
	case "text", "json":
	default:
		e.fail("LOG_FORMAT", fmt.Sprintf("%q: want text or json", s.LogFormat))
	}
	if _, err := parseLevel(s.LogLevel); err != nil {
		e.fail("LOG_LEVEL", err.Error())
	}
	for name, want := range refused {
		if v, ok := lookup(name); ok && !strings.EqualFold(v, want) && v != "" {
			e.fail(name, fmt.Sprintf("%q is not supported (only %q is)", v, want))
		}
	}
	s.Notes = notes(environ, lookup)
	return s, errors.Join(e.errs...)
}

// notes names the variables set that have no effect here, and our own
// that FromEnv does not know.
func notes(environ []string, lookup func(string) (string, bool)) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if why, ok := moot[name]; ok && why != "" {
			out = append(out, fmt.Sprintf("%s has no effect: %s", name, why))
		}
		if rest, ok := strings.CutPrefix(name, Prefix); ok && !contains(ours, rest) {
			out = append(out, fmt.Sprintf("%s is not a setting of this service (ours are %s%s)", name, Prefix, strings.Join(ours, ", "+Prefix)))
		}
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// envReader reads typed variables and collects what is wrong with them.
type envReader struct {
	lookup func(string) (string, bool)
	errs   []error
}

func (e *envReader) fail(name, why string) {
	e.errs = append(e.errs, fmt.Errorf("rls: %s: %s", name, why))
}

func (e *envReader) str(name, def string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return def
}

// parse reads a variable with conv, or returns def when it is unset or
// empty; a value conv refuses is reported as not being what want says.
func parse[T any](e *envReader, name string, def T, want string, conv func(string) (T, bool)) T {
	v, ok := e.lookup(name)
	if !ok || v == "" {
		return def
	}
	x, ok := conv(strings.TrimSpace(v))
	if !ok {
		e.fail(name, fmt.Sprintf("%q is not %s", v, want))
		return def
	}
	return x
}

func (e *envReader) int(name string, def int) int {
	return parse(e, name, def, "a whole number >= 0", func(v string) (int, bool) {
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= 0
	})
}

func (e *envReader) bool(name string, def bool) bool {
	return parse(e, name, def, "true or false", func(v string) (bool, bool) {
		b, err := strconv.ParseBool(v)
		return b, err == nil
	})
}

func (e *envReader) dur(name string, def time.Duration) time.Duration {
	return parse(e, name, def, "a duration such as 250ms or 10s", func(v string) (time.Duration, bool) {
		d, err := time.ParseDuration(v)
		return d, err == nil
	})
}

func (e *envReader) ratio(name string, def float32) float32 {
	return parse(e, name, def, "a number in [0, 1]", func(v string) (float32, bool) {
		f, err := strconv.ParseFloat(v, 32)
		return float32(f), err == nil && f >= 0 && f <= 1
	})
}

func (e *envReader) choice(name, def string, allowed ...string) string {
	v := strings.ToLower(strings.TrimSpace(e.str(name, def)))
	if v == "" {
		return def
	}
	if !contains(allowed, v) {
		e.fail(name, fmt.Sprintf("%q: want one of %s", v, strings.Join(allowed, ", ")))
		return def
	}
	return v
}

// xds reads the CONFIG_GRPC_XDS_* and XDS_CLIENT_* variables.
func (e *envReader) xds() XDS {
	x := XDS{
		ServerURL:    e.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
		NodeID:       e.str("CONFIG_GRPC_XDS_NODE_ID", "default"),
		NodeMetadata: e.pairs("CONFIG_GRPC_XDS_NODE_METADATA", "="),
		Headers:      e.pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ":"),
		ConnectRetry: e.dur("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", 3*time.Second),
		Backoff: Backoff{
			Initial:      e.dur("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10*time.Second),
			Max:          e.dur("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60*time.Second),
			RandomFactor: parse(e, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", 0.5, "a number in [0, 1]", unitFloat),
			Jitter:       e.bool("XDS_CLIENT_BACKOFF_JITTER", true),
		},
		MaxMsgSize: e.int("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0),
		TLS:        e.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false),
		ClientCert: e.str("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""),
		ClientKey:  e.str("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""),
		ServerCA:   e.str("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""),
		ServerSAN:  e.str("CONFIG_GRPC_XDS_SERVER_TLS_SAN", ""),
	}
	if strings.TrimSpace(x.ServerURL) == "" {
		e.fail("CONFIG_GRPC_XDS_SERVER_URL", "is empty: name the xDS server as host:port")
	}
	if x.ConnectRetry <= 0 {
		e.fail("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "must be above 0")
	}
	if x.Backoff.Initial <= 0 || x.Backoff.Max < x.Backoff.Initial {
		e.fail("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", fmt.Sprintf("%v must be above 0 and at most XDS_CLIENT_BACKOFF_MAX_INTERVAL (%v)", x.Backoff.Initial, x.Backoff.Max))
	}
	if (x.ClientCert == "") != (x.ClientKey == "") {
		e.fail("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "and CONFIG_GRPC_XDS_CLIENT_TLS_KEY come together")
	}
	return x
}

func unitFloat(v string) (float64, bool) {
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil && f >= 0 && f <= 1
}

// pairs reads "k1<sep>v1,k2<sep>v2" into a map; nil when unset.
func (e *envReader) pairs(name, sep string) map[string]string {
	v, ok := e.lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, found := strings.Cut(kv, sep)
		if !found || strings.TrimSpace(k) == "" {
			e.fail(name, fmt.Sprintf("%q is not a list of key%svalue", v, sep))
			return nil
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return m
}

func (e *envReader) redis(p, defURL string) RedisSettings {
	r := RedisSettings{
		SocketType:   strings.ToLower(e.str(p+"SOCKET_TYPE", "unix")),
		Type:         strings.ToLower(e.str(p+"TYPE", "single")),
		URL:          e.str(p+"URL", defURL),
		PoolSize:     e.int(p+"POOL_SIZE", 10),
		Auth:         e.str(p+"AUTH", ""),
		SentinelAuth: e.str(p+"SENTINEL_AUTH", ""),
		TLS:          e.bool(p+"TLS", false),
		Timeout:      e.dur(p+"TIMEOUT", 10*time.Second),
	}
	if r.SocketType != "tcp" && r.SocketType != "unix" {
		e.fail(p+"SOCKET_TYPE", fmt.Sprintf("%q: want tcp or unix", r.SocketType))
	}
	if r.Type != "single" && r.Type != "cluster" && r.Type != "sentinel" {
		e.fail(p+"TYPE", fmt.Sprintf("%q: want SINGLE, CLUSTER or SENTINEL", r.Type))
	}
	if r.Type == "sentinel" && len(strings.Split(r.URL, ",")) < 2 {
		e.fail(p+"URL", "a sentinel URL is the master's name then the sentinels: mymaster,host1:26379,host2:26379")
	}
	if r.PoolSize < 1 {
		e.fail(p+"POOL_SIZE", "must be at least 1")
	}
	return r
}
