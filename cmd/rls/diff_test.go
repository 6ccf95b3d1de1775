package main_test

import (
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

var diffCalls = flag.Int("rls.diff", 300, "requests the differential test sends to each service")

var reference build

// referenceBinary builds Envoy's reference rate limit service from the
// module in rls/reference, once for the test binary: with the race
// detector when the test binary has it, as rlsBinary builds ours, so that
// the packages it shares with ours (rls/reference/go.mod requires them at
// our versions) come from the build cache instead of a second compile.
func referenceBinary(t *testing.T) string {
	var flags []string
	if raceBuild {
		flags = append(flags, "-race")
	}
	return reference.get(t, "reference", filepath.Join("..", "..", "rls", "reference"), "github.com/envoyproxy/ratelimit/src/service_cmd", nil, flags...)
}

// TestDifferential runs the reference and this service in fixed-window
// mode on the same rules, the same Redis (each under its own key prefix)
// and the same random request sequence, and requires every response to be
// the same: codes, statuses, limits, remaining counts, durations until
// reset and headers. It runs with the reference's defaults and with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
//
// Each service reads the clock itself, so a request during which a second
// ticked may be counted in different windows by the two (a second's, and
// a minute's or an hour's on its edge), and its responses may differ
// rightly. Such a request is not compared, and both services' counts are
// deleted after it, so that they count alike again from the next.
func TestDifferential(t *testing.T) {
	t.Parallel()
	for _, stop := range []string{"false", "true"} {
		t.Run("stop_increment="+stop, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFiles(t, filepath.Join(dir, "v1", "ratelimit", "config"), map[string]string{"basic.yaml": basicYAML})
			root := filepath.Join(dir, "current")
			if err := os.Symlink(filepath.Join(dir, "v1"), root); err != nil {
				t.Fatal(err)
			}
			srv := redistest.StandaloneServer(t)
			prefix := redistest.Prefix(t)
			common := map[string]string{
				"REDIS_URL": srv.Addr, "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_APPDIRECTORY": "config",
				"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": stop,
				"EXPIRATION_JITTER_MAX_SECONDS": "60", "LOG_LEVEL": "warn",
			}
			withPrefix := func(p string, extra ...string) map[string]string {
				e := map[string]string{"CACHE_KEY_PREFIX": prefix + p}
				for k, v := range common {
					e[k] = v
				}
				for i := 0; i+1 < len(extra); i += 2 {
					e[extra[i]] = extra[i+1]
				}
				return e
			}
			ref := start(t, referenceBinary(t), withPrefix("ref:"))
			// Redis's answers are compared: a call slow under -race must not
			// be the failure policy's (env says more).
			ours := start(t, rlsBinary(t), withPrefix("ours:", "HYBRIDLIMIT_MODE", "fixed_window", "HYBRIDLIMIT_CONFIG_POLL_INTERVAL", "0",
				"HYBRIDLIMIT_MAX_WAIT", "2s"))
			rdb := srv.Client(t)
			rng := rand.New(rand.NewPCG(1, uint64(len(stop))))
			compared := 0
			for i := range *diffCalls {
				req := randomRequest(rng)
				t0 := time.Now().Unix()
				want, errRef := ref.call(req)
				got, errOurs := ours.call(req)
				t1 := time.Now().Unix()
				if (errRef != nil) != (errOurs != nil) {
					t.Fatalf("request %d %v: reference %v %v, ours %v %v", i, req, want, errRef, got, errOurs)
				}
				if t0 != t1 {
					forgetCounts(t, rdb, prefix)
					continue
				}
				compared++
				if errRef == nil && !proto.Equal(want, got) {
					t.Fatalf("request %d %v:\nreference %v\nours      %v", i, req, want, got)
				}
			}
			t.Logf("%d of %d requests compared, identical; the others had a second tick during them", compared, *diffCalls)
			if compared < *diffCalls/2 {
				t.Errorf("only %d of %d requests fell within one second", compared, *diffCalls)
			}
		})
	}
}

// forgetCounts deletes every key under prefix, both services' counts.
func forgetCounts(t *testing.T, rdb *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err == nil && len(keys) > 0 {
		err = rdb.Del(ctx, keys...).Err()
	}
	if err != nil {
		t.Fatalf("deleting the counts: %v", err)
	}
}

// randomRequest draws a request from descriptors that exercise every rule
// of basicYAML: plain, shared and wildcard values, unlimited, zero, shadow,
// nested rules and replaces, no match, a depth that matches nothing, limit
// overrides, and hits_addend on the request and per descriptor.
func randomRequest(rng *rand.Rand) *rlspb.RateLimitRequest {
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	makers := []func() [][2]string{
		func() [][2]string { return entries("key1", pick("a", "b", "c")) },
		func() [][2]string { return entries("key2", pick("x", "y", "z", "w")) },
		func() [][2]string { return entries("path", pick("/api/a", "/api/v2/b", "/api/v2/c", "/other")) },
		func() [][2]string { return entries("unlimited", "u") },
		func() [][2]string { return entries("zero", "z") },
		func() [][2]string { return entries("shadow", pick("s", "t")) },
		func() [][2]string { return entries("client", pick("c1", "c2"), "route", "r") },
		func() [][2]string { return entries("client", pick("c1", "c2"), "tier", "t") },
		func() [][2]string { return entries("nothing", "n") },
		func() [][2]string { return entries("key1", "a", "deeper", "d") },
	}
	var descs [][][2]string
	for range 1 + rng.IntN(3) {
		descs = append(descs, makers[rng.IntN(len(makers))]())
	}
	req := request("basic", uint32(rng.IntN(3)), descs...)
	for _, d := range req.Descriptors {
		switch rng.IntN(8) {
		case 0:
			d.HitsAddend = wrapperspb.UInt64(uint64(rng.IntN(3)))
		case 1:
			d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(1 + rng.IntN(6)), Unit: typepb.RateLimitUnit_HOUR}
		}
	}
	return req
}
