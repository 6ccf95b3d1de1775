package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestServer runs the example against a real redis-server, and calls it
// from a real client: ten calls a minute per peer, then ResourceExhausted
// with a RetryInfo, and the metrics of it.
func TestServer(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	ctx, cancel := context.WithCancel(context.Background())
	type addrs struct{ grpc, metrics string }
	ready := make(chan addrs, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-addr", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-redis", redistest.StandaloneServer(t).Addr},
			io.Discard, func(g, m string) { ready <- addrs{g, m} })
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-errc:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening after 10s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	call := metadata.AppendToOutgoingContext(ctx, "x-api-key", "k1")
	for i := range 10 {
		var hdr metadata.MD
		if _, err := client.Check(call, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if len(hdr.Get("ratelimit")) != 1 {
			t.Errorf("call %d: header metadata %v", i, hdr)
		}
	}
	_, err = client.Check(call, &healthpb.HealthCheckRequest{})
	st, _ := status.FromError(err)
	var retry time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri.GetRetryDelay().AsDuration()
		}
	}
	if st.Code() != codes.ResourceExhausted || retry <= 0 || retry > 6*time.Second {
		t.Errorf("11th call: %v, RetryInfo %v; want ResourceExhausted and at most 6s", err, retry)
	}
	resp, err := http.Get("http://" + a.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`hybridlimit_grpc_requests_total{result="limited"} 1`,
		`hybridlimit_grpc_rule_decisions_total{limiter="global",mode="enforce",outcome="allowed",rule="per-key"} 10`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
