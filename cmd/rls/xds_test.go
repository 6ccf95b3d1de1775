package main_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit/internal/testpki"
)

// xdsNode is the node id Envoy Gateway's control plane serves the rate
// limit rules to.
const xdsNode = "envoy-ratelimit"

// xdsServer is go-control-plane's snapshot-cache xDS server, as Envoy
// Gateway's control plane runs it: ADS on gRPC with mutual TLS 1.3, client
// certificates required. It records every request it is sent.
type xdsServer struct {
	t     *testing.T
	addr  string
	cache cachev3.SnapshotCache
	srv   *grpc.Server
	done  chan struct{}
	mu    sync.Mutex
	reqs  []*discoverypb.DiscoveryRequest
	md    []metadata.MD // of each stream opened
}

// startXDS serves on addr ("" for a free loopback port) until stop or the
// end of the test.
func startXDS(t *testing.T, addr string, conf *tls.Config) *xdsServer {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lis net.Listener
	var err error
	// A port just closed may take a moment to be free again.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	x := &xdsServer{t: t, addr: lis.Addr().String(), cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), done: make(chan struct{})}
	cb := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoverypb.DiscoveryRequest) error {
			x.mu.Lock()
			defer x.mu.Unlock()
			x.reqs = append(x.reqs, r)
			return nil
		},
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			x.mu.Lock()
			defer x.mu.Unlock()
			x.md = append(x.md, md)
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	x.srv = grpc.NewServer(grpc.Creds(credentials.NewTLS(conf)))
	discoverypb.RegisterAggregatedDiscoveryServiceServer(x.srv, serverv3.NewServer(ctx, x.cache, cb))
	go func() { _ = x.srv.Serve(lis); cancel(); close(x.done) }()
	t.Cleanup(x.stop)
	return x
}

// stop ends the server and every stream on it.
func (x *xdsServer) stop() {
	x.srv.Stop()
	<-x.done
}

// set makes the rules of version the snapshot of the rate limit node.
func (x *xdsServer) set(version string, confs ...*rlsconfpb.RateLimitConfig) {
	x.t.Helper()
	res := make([]types.Resource, len(confs))
	for i, c := range confs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		x.t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), xdsNode, snap); err != nil {
		x.t.Fatal(err)
	}
}

// requests returns the requests received so far.
func (x *xdsServer) requests() []*discoverypb.DiscoveryRequest {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]*discoverypb.DiscoveryRequest(nil), x.reqs...)
}

// acked reports whether version was ACKed; nacks returns the NACKs.
func (x *xdsServer) acked(version string) bool {
	for _, r := range x.requests() {
		if r.GetVersionInfo() == version && r.GetResponseNonce() != "" && r.GetErrorDetail() == nil {
			return true
		}
	}
	return false
}

func (x *xdsServer) nacks() []*discoverypb.DiscoveryRequest {
	var out []*discoverypb.DiscoveryRequest
	for _, r := range x.requests() {
		if r.GetErrorDetail() != nil {
			out = append(out, r)
		}
	}
	return out
}

// rlConfig is a RateLimitConfig of one domain whose descriptors are each a
// key with a limit per hour (0: none).
func rlConfig(domain string, keys ...any) *rlsconfpb.RateLimitConfig {
	c := &rlsconfpb.RateLimitConfig{Name: domain, Domain: domain}
	for i := 0; i+1 < len(keys); i += 2 {
		c.Descriptors = append(c.Descriptors, &rlsconfpb.RateLimitDescriptor{
			Key:       keys[i].(string),
			RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_HOUR, RequestsPerUnit: uint32(keys[i+1].(int))},
		})
	}
	return c
}

// xdsTLS is the mutual TLS of an Envoy Gateway deployment: the control
// plane's server config (TLS 1.3, client certificates required), and the
// environment that gives the rate limit service its client certificate.
func xdsTLS(t *testing.T) (*tls.Config, map[string]string) {
	ca := testpki.NewCA(t, "envoy-gateway-ca")
	server := ca.Issue(t, "envoy-gateway", "envoy-gateway", "127.0.0.1")
	caFile, certFile, keyFile := ca.Write(t, filepath.Join(t.TempDir(), "certs"), ca.Issue(t, xdsNode, xdsNode))
	conf := &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{server.TLS(t)},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
	}
	return conf, map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_ID": xdsNode,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": caFile,
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": certFile, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": keyFile,
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN":                "envoy-gateway",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "100ms",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL":           "100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "400ms",
	}
}

// limited reports whether a call for key=value in domain matched a rule,
// and whether it was over the limit.
func limited(t *testing.T, p *proc, domain, key, value string) (matched, over bool) {
	t.Helper()
	r := p.mustCall(request(domain, 0, entries(key, value)))
	return r.Statuses[0].GetCurrentLimit() != nil, r.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT
}

// TestXDS runs the service on rules from go-control-plane's snapshot-cache
// server over mutual TLS, as Envoy Gateway deploys it: the first rules
// arrive and limit; a new snapshot replaces them within a second; a broken
// one is NACKed with its error and the old rules keep limiting; the server
// stopped and restarted costs no decision, and the rules it then serves
// arrive.
func TestXDS(t *testing.T) {
	serverTLS, xenv := xdsTLS(t)
	xs := startXDS(t, "", serverTLS)
	xs.set("1", rlConfig("edge", "remote_address", 3))
	e := env(t, t.TempDir(), "CONFIG_GRPC_XDS_SERVER_URL", xs.addr,
		"CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,team=edge", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-tenant:blue")
	for k, v := range xenv {
		e[k] = v
	}
	p := start(t, rlsBinary(t), e) // serving once the first rules are in
	first := xs.requests()[0]
	if n := first.GetNode(); n.GetId() != xdsNode || n.GetMetadata().GetFields()["zone"].GetStringValue() != "a" ||
		n.GetMetadata().GetFields()["team"].GetStringValue() != "edge" || first.GetTypeUrl() != resourcev3.RateLimitConfigType {
		t.Errorf("first request: node %v, type %q", n, first.GetTypeUrl())
	}
	xs.mu.Lock()
	if len(xs.md) == 0 || strings.Join(xs.md[0].Get("x-tenant"), ",") != "blue" {
		t.Errorf("stream metadata %v, want x-tenant: blue", xs.md)
	}
	xs.mu.Unlock()
	for i := 1; i <= 4; i++ {
		matched, over := limited(t, p, "edge", "remote_address", "10.0.0.1")
		if !matched || over != (i == 4) {
			t.Fatalf("call %d under version 1: matched %v over %v, want a match, over only on the 4th", i, matched, over)
		}
	}
	if !xs.acked("1") {
		t.Fatalf("version 1 not ACKed: %v", xs.requests())
	}

	t.Run("new snapshot", func(t *testing.T) {
		xs.set("2", rlConfig("edge", "remote_address", 3, "user", 1))
		pushed := time.Now()
		for {
			if matched, _ := limited(t, p, "edge", "user", "alice"); matched {
				break
			}
			if time.Since(pushed) > time.Second {
				t.Fatalf("version 2's rule not in use a second after it was pushed:\n%s", p.out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, over := limited(t, p, "edge", "user", "alice"); !over {
			t.Fatal("user=alice: the second call of a rule of 1 an hour is not over the limit")
		}
		waitFor(t, "version 2 ACKed", func() bool { return xs.acked("2") })
	})

	t.Run("broken snapshot", func(t *testing.T) {
		broken := rlConfig("edge", "user", 5, "user", 6) // a composite key defined twice
		xs.set("3", broken)
		waitFor(t, "a NACK", func() bool { return len(xs.nacks()) > 0 })
		n := xs.nacks()[0]
		if msg := n.GetErrorDetail().GetMessage(); !strings.Contains(msg, `composite key "edge.user" is defined twice`) || !strings.Contains(msg, `resource "edge"`) {
			t.Errorf("NACK message %q: want the error, naming the resource", msg)
		}
		if n.GetVersionInfo() != "2" {
			t.Errorf("NACK version_info %q, want the version in use, 2", n.GetVersionInfo())
		}
		// Version 2 gives bob one call an hour; version 3 would give 5.
		if matched, over := limited(t, p, "edge", "user", "bob"); !matched || over {
			t.Fatalf("user=bob, first call: matched %v over %v, want admitted by version 2's rule", matched, over)
		}
		if _, over := limited(t, p, "edge", "user", "bob"); !over {
			t.Fatal("user=bob, second call: admitted; version 2's limit of 1 an hour no longer limits")
		}
		if got := p.metric("ratelimit_service_config_load_error"); got != 1 {
			t.Errorf("config_load_error = %v, want 1 (the rejected version, counted once)", got)
		}
		// The snapshot cache sends a NACKed version again at once; the
		// client answers after its backoff (100ms doubling to 400ms), so
		// the two do not spin.
		time.Sleep(time.Second)
		if got := len(xs.nacks()); got > 8 {
			t.Errorf("%d NACKs within about a second: the client spins with the server", got)
		}
		xs.set("4", rlConfig("edge", "remote_address", 3, "user", 1, "tier", 1))
		waitFor(t, "version 4 in use", func() bool { matched, _ := limited(t, p, "edge", "tier", "gold"); return matched })
	})

	t.Run("server restarted", func(t *testing.T) {
		var calls, failures atomic.Int64
		var firstErr atomic.Value
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := p.call(request("edge", 0, entries("remote_address", "10.9.9.9")))
				calls.Add(1)
				if err != nil || r.Statuses[0].GetCurrentLimit() == nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		xs.stop()
		time.Sleep(500 * time.Millisecond) // decisions go on while the server is away
		xs2 := startXDS(t, xs.addr, serverTLS)
		xs2.set("5", rlConfig("edge", "remote_address", 3, "tier", 1, "plan", 1))
		waitFor(t, "version 5 in use after the restart", func() bool { matched, _ := limited(t, p, "edge", "plan", "free"); return matched })
		close(stop)
		wg.Wait()
		if failures.Load() != 0 || calls.Load() == 0 {
			t.Fatalf("%d of %d decisions failed while the xDS server restarted (first: %v)", failures.Load(), calls.Load(), firstErr.Load())
		}
	})
}

// TestXDSUnreachableAtStart starts the service with no xDS server
// listening: without FORCE_START_WITHOUT_INITIAL_CONFIG it is not ready and
// calls fail until the server comes up and its rules arrive; with it the
// service is ready at once and calls fail until then, as the reference's.
func TestXDSUnreachableAtStart(t *testing.T) {
	for _, force := range []bool{false, true} {
		name := "wait"
		if force {
			name = "force_start"
		}
		t.Run(name, func(t *testing.T) {
			serverTLS, xenv := xdsTLS(t)
			addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
			e := env(t, t.TempDir(), "CONFIG_GRPC_XDS_SERVER_URL", addr)
			for k, v := range xenv {
				e[k] = v
			}
			var p *proc
			if force {
				e["FORCE_START_WITHOUT_INITIAL_CONFIG"] = "true"
				p = start(t, rlsBinary(t), e) // ready without rules
				_, err := p.call(request("edge", 0, entries("remote_address", "10.0.0.1")))
				if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no rate limit configuration") {
					t.Fatalf("call before any rules: %v, want Unavailable: no rate limit configuration", err)
				}
			} else {
				p = startUntil(t, (*proc).awaitHTTP, rlsBinary(t), e)
				time.Sleep(300 * time.Millisecond) // a few connection attempts
				if code, body := p.get(p.httpURL + "/healthcheck"); code != http.StatusInternalServerError || !strings.Contains(body, "xDS") {
					t.Fatalf("/healthcheck before any rules = %d %q, want 500 naming the xDS server", code, body)
				}
				if _, err := p.call(request("edge", 0, entries("remote_address", "10.0.0.1"))); status.Code(err) != codes.Unavailable {
					t.Fatalf("call before any rules: %v, want Unavailable", err)
				}
			}
			xs := startXDS(t, addr, serverTLS)
			xs.set("1", rlConfig("edge", "remote_address", 3))
			p.waitServing()
			waitFor(t, "the rules in use", func() bool {
				r, err := p.call(request("edge", 0, entries("remote_address", "10.0.0.2")))
				return err == nil && r.Statuses[0].GetCurrentLimit() != nil
			})
		})
	}
}

// TestXDSHealthyWithConfig runs the service as Envoy Gateway does
// (FORCE_START_WITHOUT_INITIAL_CONFIG) with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: rules that define no domain are
// ACKed but leave it not ready, until rules with a domain arrive.
func TestXDSHealthyWithConfig(t *testing.T) {
	serverTLS, xenv := xdsTLS(t)
	xs := startXDS(t, "", serverTLS)
	xs.set("1")
	e := env(t, t.TempDir(), "CONFIG_GRPC_XDS_SERVER_URL", xs.addr, "FORCE_START_WITHOUT_INITIAL_CONFIG", "true",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")
	for k, v := range xenv {
		e[k] = v
	}
	p := startUntil(t, (*proc).awaitHTTP, rlsBinary(t), e)
	waitFor(t, "version 1 ACKed", func() bool { return xs.acked("1") })
	if code, body := p.get(p.httpURL + "/healthcheck"); code != http.StatusInternalServerError || !strings.Contains(body, "no domain") {
		t.Fatalf("/healthcheck with rules of no domain = %d %q, want 500 saying so", code, body)
	}
	xs.set("2", rlConfig("edge", "remote_address", 3))
	p.waitServing()
}

// TestXDSMaxMsgSize: a response larger than XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES
// is refused by the stream, and said so in the log; no rules load from it.
func TestXDSMaxMsgSize(t *testing.T) {
	serverTLS, xenv := xdsTLS(t)
	xs := startXDS(t, "", serverTLS)
	xs.set("1", rlConfig("edge", "remote_address", 3, "user", 1, "tier", 1, "plan", 1))
	e := env(t, t.TempDir(), "CONFIG_GRPC_XDS_SERVER_URL", xs.addr, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "64")
	for k, v := range xenv {
		e[k] = v
	}
	p := startUntil(t, (*proc).awaitHTTP, rlsBinary(t), e)
	waitFor(t, "the refusal in the log", func() bool { return strings.Contains(p.out.String(), "larger than max") })
	if code, body := p.get(p.httpURL + "/healthcheck"); code != http.StatusInternalServerError || !strings.Contains(body, "xDS") {
		t.Fatalf("/healthcheck = %d %q, want 500: no rules from the xDS server", code, body)
	}
}
