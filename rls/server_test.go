package rls

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestServerLifecycle runs a whole Server in the process on an embedded
// Redis, answers a call, and stops it: Run returns after its ctx ends and
// leaves no goroutine behind (TestMain checks).
func TestServerLifecycle(t *testing.T) {
	for _, mode := range []string{"hybrid", "fixed_window"} {
		t.Run(mode, func(t *testing.T) {
			mr := miniredis.RunT(t)
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
				t.Fatal(err)
			}
			rules := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"
			if err := os.WriteFile(filepath.Join(root, "config", "d.yaml"), []byte(rules), 0o644); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{
				"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
				"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": mr.Addr(), "RUNTIME_ROOT": root, "HYBRIDLIMIT_MODE": mode,
				"HYBRIDLIMIT_MAX_WAIT": "2s", // the embedded Redis under -race is slow
			}
			set, err := FromEnv(lookupOf(env), nil)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := NewServer(set, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx) }()
			defer func() {
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("Run = %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Run did not return within 10s of its ctx ending")
				}
			}()
			var addr string
			for deadline := time.Now().Add(5 * time.Second); addr == ""; {
				if addr, _, _ = srv.Addrs(); addr == "" {
					if time.Now().After(deadline) {
						t.Fatal("not listening after 5s")
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := rlspb.NewRateLimitServiceClient(conn)
			req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlpb.RateLimitDescriptor{{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
			for i, want := range []uint32{2, 1, 0} {
				cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := c.ShouldRateLimit(cctx, req)
				ccancel()
				if err != nil || r.Statuses[0].LimitRemaining != want {
					t.Fatalf("call %d: %v %v, want remaining %d", i, r, err, want)
				}
			}
			if n, err := testutil.GatherAndCount(srv.Registry(), "ratelimit_service_rate_limit_total_hits"); err != nil || n != 1 {
				t.Fatalf("total_hits series: %d %v, want 1", n, err)
			}
		})
	}
}
