package rls

import (
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

func lookupOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestFromEnvDefaults(t *testing.T) {
	s, err := FromEnv(lookupOf(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Port != 8080 || s.GRPCPort != 8081 || s.DebugPort != 6070 || s.Redis.SocketType != "unix" ||
		s.Runtime.Dir != "/srv/runtime_data/current/config" || s.NearLimitRatio != 0.8 || s.Mode != ModeHybrid ||
		s.Policy != hybridlimit.FallbackLocal || s.MaxWait != 10*time.Millisecond || s.LimitHeader != "RateLimit-Limit" ||
		s.CountEveryHit {
		t.Fatalf("defaults: %+v", s)
	}
	if s, err := FromEnv(lookupOf(map[string]string{"HYBRIDLIMIT_COUNT_EVERY_HIT": "true"}), nil); err != nil || !s.CountEveryHit {
		t.Fatalf("HYBRIDLIMIT_COUNT_EVERY_HIT=true: CountEveryHit %v, %v", s.CountEveryHit, err)
	}
}

// TestFromEnvXDS reads Envoy Gateway's xDS settings, and the reference's
// defaults for those it leaves out.
func TestFromEnvXDS(t *testing.T) {
	s, err := FromEnv(lookupOf(map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,team=b", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	x := s.XDS
	if s.ConfigType != ConfigXDS || !s.ForceStart || x.ServerURL != "envoy-gateway:18001" || x.NodeID != "envoy-ratelimit" ||
		x.NodeMetadata["zone"] != "a" || x.NodeMetadata["team"] != "b" || !x.TLS || x.ClientKey != "/certs/tls.key" ||
		x.ConnectRetry != 3*time.Second || x.Backoff != (Backoff{Initial: 10 * time.Second, Max: time.Minute, RandomFactor: 0.5, Jitter: true}) {
		t.Fatalf("xDS settings: %+v", s)
	}
	if d, _ := FromEnv(lookupOf(nil), nil); d.ConfigType != ConfigFile || d.ForceStart {
		t.Fatalf("defaults: config %q, force start %v", d.ConfigType, d.ForceStart)
	}
}

func TestFromEnvErrors(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"PORT": "x"}, "PORT"},
		{map[string]string{"REDIS_TYPE": "ring"}, "REDIS_TYPE"},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "host:1"}, "master's name"},
		{map[string]string{"SHADOW_MODE": "maybe"}, "SHADOW_MODE"},
		{map[string]string{"NEAR_LIMIT_RATIO": "2"}, "NEAR_LIMIT_RATIO"},
		{map[string]string{"HYBRIDLIMIT_MODE": "sliding"}, "HYBRIDLIMIT_MODE"},
		{map[string]string{"HYBRIDLIMIT_MODE": "fixed_window", "HYBRIDLIMIT_FAILURE_POLICY": "fallback-local"}, "needs the hybrid mode"},
		{map[string]string{"HYBRIDLIMIT_MODE": "fixed_window", "HYBRIDLIMIT_COUNT_EVERY_HIT": "true"}, "counts every hit already"},
		{map[string]string{"HYBRIDLIMIT_MAX_WAIT": "0s"}, "HYBRIDLIMIT_MAX_WAIT"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"}, "CONFIG_TYPE"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "2m"}, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "3"}, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c"}, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "novalue"}, "CONFIG_GRPC_XDS_NODE_METADATA"},
		{map[string]string{"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{"LOG_FORMAT": "xml"}, "LOG_FORMAT"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_TLS_CERT"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c", "GRPC_SERVER_TLS_KEY": "/k", "GRPC_CLIENT_TLS_SAN": "envoy"}, "GRPC_CLIENT_TLS_CACERT"},
		{map[string]string{"EXTRA_TAGS": "novalue"}, "EXTRA_TAGS"},
		{map[string]string{"TRACING_EXPORTER_PROTOCOL": "zipkin"}, "TRACING_EXPORTER_PROTOCOL"},
		{map[string]string{"TRACING_SAMPLING_RATE": "-1"}, "TRACING_SAMPLING_RATE"},
	} {
		if _, err := FromEnv(lookupOf(tt.env), nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("FromEnv(%v) = %v, want an error naming %s", tt.env, err, tt.want)
		}
	}
}

func TestFromEnvNotes(t *testing.T) {
	env := map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1000", "HYBRIDLIMIT_SYNC_INTERVL": "1s", "REDIS_URL": "x:1"}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	s, err := FromEnv(lookupOf(env), environ)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(s.Notes, "\n")
	if !strings.Contains(all, "LOCAL_CACHE_SIZE_IN_BYTES has no effect") || !strings.Contains(all, "HYBRIDLIMIT_SYNC_INTERVL is not a setting") {
		t.Fatalf("notes:\n%s", all)
	}
}
