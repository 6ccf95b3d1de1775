// Command grpcserver is a small gRPC service (the standard health service)
// protected by the grpclimit interceptors against Redis: a quota per peer
// address on the hybrid limiter, a quota per API key (metadata x-api-key)
// on an exact limiter, health checks of load balancers exempt, and
// Prometheus metrics on a separate HTTP port.
//
//	go run ./examples/grpcserver -miniredis
//	go run ./examples/grpcserver -redis 127.0.0.1:6379
//
// Then, with grpcurl:
//
//	for i in $(seq 12); do grpcurl -plaintext -H 'x-api-key: k1' localhost:9090 grpc.health.v1.Health/Check; done
//	curl -s localhost:9091/metrics | grep hybridlimit_grpc_
//
// A denied call fails with ResourceExhausted and a google.rpc.RetryInfo
// saying when to retry; every response carries ratelimit and
// ratelimit-policy header metadata.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/metrics"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "grpcserver:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then stops the gRPC server, the metrics
// server and the limiter, in that order. ready, if set, is told the gRPC
// and metrics addresses once both listen.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(grpcAddr, metricsAddr string)) error {
	fs := flag.NewFlagSet("grpcserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9090", "gRPC address to listen on")
	metricsAddr := fs.String("metrics", "127.0.0.1:9091", "HTTP address of /metrics")
	redisAddr := fs.String("redis", "", "Redis address, such as 127.0.0.1:6379")
	embedded := fs.Bool("miniredis", false, "use an embedded miniredis instead of -redis (a demo)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	switch {
	case *redisAddr != "" && *embedded:
		return errors.New("-redis and -miniredis exclude each other")
	case *embedded:
		m, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("miniredis: %w", err)
		}
		defer m.Close()
		*redisAddr = m.Addr()
	case *redisAddr == "":
		return errors.New("give -redis ADDR, or -miniredis to run without a Redis")
	}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	hybrid, err := hlsync.New(rdb, hlsync.WithLogger(log))
	if err != nil {
		return err
	}
	if err := hybrid.Start(); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hybrid.Close(cctx); err != nil {
			log.Warn("closing the limiter", "err", err)
		}
	}()
	exact, err := global.New(rdb, global.GCRA)
	if err != nil {
		return err
	}
	ic, err := grpclimit.New([]grpclimit.Rule{
		// Every peer address: 10 calls a minute, across all replicas.
		{Name: "per-peer", Limiter: hybrid, Limit: hybridlimit.PerMinute(10), Key: grpclimit.PeerIP(),
			Exempt: grpclimit.Methods("/grpc.health.v1.Health/Watch")},
		// Every API key: 100 a minute, exact; if Redis is down, refuse.
		{Name: "per-key", Limiter: exact, Limit: hybridlimit.PerMinute(100), Key: grpclimit.MetadataDigest("x-api-key"),
			OnError: hybridlimit.FailClosed},
	}, grpclimit.WithLogger(log))
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	ici, err := metrics.NewInterceptorCollector(ic)
	if err != nil {
		return err
	}
	hc, err := metrics.NewHybridCollector(hybrid)
	if err != nil {
		return err
	}
	reg.MustRegister(ici, hc)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	msrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	mln, err := net.Listen("tcp", *metricsAddr)
	if err != nil {
		return err
	}
	mdone := make(chan error, 1)
	go func() { mdone <- msrv.Serve(mln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = msrv.Shutdown(sctx)
		<-mdone
	}()

	srv := grpc.NewServer(grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream()))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	log.Info("listening", "grpc", ln.Addr().String(), "metrics", mln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String(), mln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	hs.Shutdown()
	srv.GracefulStop()
	return <-errc
}
