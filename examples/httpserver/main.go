// Command httpserver is a small HTTP service protected by the httplimit
// middleware against Redis: a quota per client IP on the hybrid limiter, a
// quota per API key on an exact limiter, a per-route cap on an expensive
// endpoint decided in process, and Prometheus metrics of it all.
//
//	go run ./examples/httpserver -redis 127.0.0.1:6379
//	go run ./examples/httpserver -miniredis          # embedded Redis, runs anywhere
//	go run ./examples/httpserver -miniredis -config examples/httpserver/rules.yaml
//
// Then:
//
//	for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' localhost:8080/hello; done
//	curl -si localhost:8080/hello        # RateLimit-Policy, RateLimit, and 429 once spent
//	curl -s localhost:8080/metrics | grep hybridlimit_
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
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/metrics"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down: the server first, so no
// request is in flight, then the limiter, which hands its unused allowance
// back to Redis. ready, if set, is told the address once the server listens.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("httpserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	redisAddr := fs.String("redis", "", "Redis address, such as 127.0.0.1:6379")
	embedded := fs.Bool("miniredis", false, "use an embedded miniredis instead of -redis (a demo: its keys never expire)")
	configPath := fs.String("config", "", "rules file (.json, .yaml or .yml); default: the rules built in main.go")
	trusted := fs.String("trust", "", "comma-separated CIDR prefixes of trusted proxies, whose X-Forwarded-For is believed (built-in rules; a rules file says client_ip)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	switch {
	case *redisAddr != "" && *embedded:
		return errors.New("-redis and -miniredis exclude each other")
	case *trusted != "" && *configPath != "":
		return errors.New("-trust is for the built-in rules: with -config, give the trusted proxies in the file's client_ip")
	case *embedded:
		m, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("miniredis: %w", err)
		}
		defer m.Close()
		*redisAddr = m.Addr()
		log.Info("using an embedded miniredis", "addr", m.Addr())
	case *redisAddr == "":
		return errors.New("give -redis ADDR, or -miniredis to run without a Redis")
	}
	// ContextTimeoutEnabled lets the limiters' deadlines cut a slow call
	// short; no retries, so a script whose reply was lost never runs twice.
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

	proxies, err := httplimit.ParsePrefixes(splitList(*trusted)...)
	if err != nil {
		return err
	}
	var mw *httplimit.Middleware
	if *configPath != "" {
		cfg, err := httplimit.LoadConfigFile(*configPath)
		if err != nil {
			return err
		}
		mw, err = cfg.Middleware(httplimit.Env{Hybrid: hybrid, Redis: rdb}, httplimit.WithLogger(log))
		if err != nil {
			return err
		}
	} else if mw, err = builtinRules(hybrid, rdb, &httplimit.ClientIP{TrustedProxies: proxies}, log); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	hc, err := metrics.NewHybridCollector(hybrid)
	if err != nil {
		return err
	}
	mc, err := metrics.NewMiddlewareCollector(mw)
	if err != nil {
		return err
	}
	reg.MustRegister(hc, mc)

	srv := &http.Server{Handler: routes(mw, reg), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	log.Info("listening", "addr", ln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// builtinRules shows the Go API: three rules, evaluated in this order.
func builtinRules(hybrid *hlsync.Limiter, rdb redis.UniversalClient, clientIP *httplimit.ClientIP, log *slog.Logger) (*httplimit.Middleware, error) {
	exact, err := global.New(rdb, global.GCRA)
	if err != nil {
		return nil, err
	}
	tbl, err := local.NewTable(local.WithMaxKeys(100_000))
	if err != nil {
		return nil, err
	}
	inProcess, err := httplimit.NewLocal(tbl)
	if err != nil {
		return nil, err
	}
	return httplimit.New([]httplimit.Rule{
		// Every client IP (IPv6 by /64): 10 a minute, across all replicas.
		{Name: "per-ip", Limiter: hybrid, Limit: hybridlimit.PerMinute(10), Key: httplimit.IP(clientIP)},
		// Every API key: 100 a minute, exact; if Redis is down, refuse.
		{Name: "per-key", Limiter: exact, Limit: hybridlimit.PerMinute(100), Key: httplimit.APIKey("X-API-Key"),
			OnError: httplimit.FailClosed},
		// The expensive route: 2 a second per client, per replica.
		{Name: "search", Limiter: inProcess, Limit: hybridlimit.PerSecond(2),
			Match: httplimit.PathPrefixes("/search"),
			Key:   httplimit.Join(httplimit.Route(), httplimit.IP(clientIP)), Exempt: httplimit.Methods("HEAD")},
	}, httplimit.WithLegacyHeaders(), httplimit.WithLogger(log))
}

// routes wraps each limited handler in the middleware, inside the mux, so
// that the route rule sees the matched pattern; health and metrics stay
// unlimited.
func routes(mw *httplimit.Middleware, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /hello", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	mux.Handle("GET /search", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "results for %q\n", r.URL.Query().Get("q"))
	})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
