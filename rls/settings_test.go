package rls

import (
	"strings"
	"testing"
	"time"
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
		s.Policy != PolicyFallbackLocal || s.MaxWait != 10*time.Millisecond || s.LimitHeader != "RateLimit-Limit" {
		t.Fatalf("defaults: %+v", s)
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
		{map[string]string{"HYBRIDLIMIT_MAX_WAIT": "0s"}, "HYBRIDLIMIT_MAX_WAIT"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, "CONFIG_TYPE"},
		{map[string]string{"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{"LOG_FORMAT": "xml"}, "LOG_FORMAT"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_TLS_CERT"},
		{map[string]string{"EXTRA_TAGS": "novalue"}, "EXTRA_TAGS"},
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
