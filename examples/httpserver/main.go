// Command httpserver is a small HTTP service protected by the httplimit
// middleware against Redis: a quota per client IP on the hybrid limiter, a
// quota per API key on an exact limiter whose size depends on the key's
// plan, a per-route cap on an expensive endpoint decided in process, and
// Prometheus metrics of it all. A request one rule rejects costs the
// others nothing; each 429 is logged with who was throttled.
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
//	curl -s -X POST 'localhost:8080/admin/reset?rule=per-ip&key=127.0.0.1'   # from loopback only
//	kill -HUP <pid>                      # with -config: reload the rules, quotas kept
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
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
	"github.com/hybridlimit/hybridlimit/httplimit/config"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/metrics"
	"github.com/hybridlimit/hybridlimit/rules"
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
	maxWait := fs.Duration("max-wait", 100*time.Millisecond, "how long a hybrid decision out of allowance waits for Redis before the failure policy decides (0: never)")
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

	hybrid, err := hlsync.New(rdb, hlsync.WithLogger(log), hlsync.WithMaxWait(*maxWait))
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
	// One in-process table for the local rules, kept across reloads.
	tbl, err := local.NewTable(local.WithMaxKeys(100_000))
	if err != nil {
		return err
	}
	inProcess, err := rules.NewLocal(tbl)
	if err != nil {
		return err
	}
	env := config.Env{Hybrid: hybrid, Redis: rdb, Local: inProcess}
	opts := []httplimit.Option{httplimit.WithLogger(log), httplimit.WithOnLimited(throttled(log))}
	var mw *httplimit.Middleware
	if *configPath != "" {
		cfg, err := config.LoadFile(*configPath)
		if err != nil {
			return err
		}
		if mw, err = cfg.Middleware(env, opts...); err != nil {
			return err
		}
		stopReload := reloadOnHangup(*configPath, mw, env, log)
		defer stopReload()
	} else if mw, err = builtinRules(hybrid, rdb, inProcess, &httplimit.ClientIP{TrustedProxies: proxies}, opts); err != nil {
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

// builtinRules shows the Go API: three rules, evaluated in this order,
// each asked only if the ones before it admitted the request.
func builtinRules(hybrid *hlsync.Limiter, rdb redis.UniversalClient, inProcess *rules.Local, clientIP *httplimit.ClientIP, opts []httplimit.Option) (*httplimit.Middleware, error) {
	exact, err := global.New(rdb, global.GCRA)
	if err != nil {
		return nil, err
	}
	// The per-key quota depends on the key's plan. A real service reads
	// the plan from the account the key belongs to; the demo trusts a
	// header.
	plans := map[string]hybridlimit.Limit{"pro": hybridlimit.PerMinute(1000)}
	perPlan := func(r *http.Request) hybridlimit.Limit {
		if l, ok := plans[r.Header.Get("X-Plan")]; ok {
			return l
		}
		return hybridlimit.PerMinute(100)
	}
	return httplimit.New([]httplimit.Rule{
		// Every client IP (IPv6 by /64): 10 a minute, across all replicas.
		{Name: "per-ip", Limiter: hybrid, Limit: hybridlimit.PerMinute(10), Key: httplimit.IP(clientIP)},
		// Every API key: 100 or 1000 a minute, exact; if Redis is down, refuse.
		{Name: "per-key", Limiter: exact, LimitFunc: perPlan, Key: httplimit.APIKey("X-API-Key"),
			OnError: hybridlimit.FailClosed},
		// The expensive route: 2 a second per client, per replica.
		{Name: "search", Limiter: inProcess, Limit: hybridlimit.PerSecond(2),
			Match: httplimit.PathPrefixes("/search"),
			Key:   rules.Join(httplimit.Route(), httplimit.IP(clientIP)), Exempt: httplimit.Methods("HEAD")},
	}, append([]httplimit.Option{httplimit.WithLegacyHeaders()}, opts...)...)
}

// throttled answers a 429 as the middleware would, a problem+json body
// naming the violated policy (the fields and Retry-After are set already),
// after logging who was throttled.
func throttled(log *slog.Logger) func(http.ResponseWriter, *http.Request, *httplimit.Decision) {
	return func(w http.ResponseWriter, r *http.Request, d *httplimit.Decision) {
		log.Info("throttled", "policies", d.Violated, "remote", r.RemoteAddr, "path", r.URL.Path, "retry_after", d.RetryAfter)
		body, _ := json.Marshal(map[string]any{
			"type":              httplimit.ProblemQuotaExceeded,
			"title":             "Request cannot be satisfied as assigned quota has been exceeded",
			"status":            http.StatusTooManyRequests,
			"violated-policies": d.Violated,
		})
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write(append(body, '\n'))
	}
}

// reloadOnHangup reloads the rules file on SIGHUP, until the returned
// function is called. A file that fails to load or build changes nothing.
func reloadOnHangup(path string, mw *httplimit.Middleware, env config.Env, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-hup:
			}
			cfg, err := config.LoadFile(path)
			if err == nil {
				err = cfg.Reload(mw, env)
			}
			if err != nil {
				log.Warn("rules not reloaded", "path", path, "err", err)
				continue
			}
			log.Info("rules reloaded", "path", path, "rules", len(cfg.Rules))
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-exited
	}
}

// routes wraps each limited handler in the middleware, inside the mux, so
// that health and metrics stay unlimited; the route rule reads the pattern
// the mux matched.
func routes(mw *httplimit.Middleware, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /hello", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	mux.Handle("GET /search", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "results for %q\n", r.URL.Query().Get("q"))
	})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	// An operator forgets a client's quota without knowing the limiter's
	// key layout: POST /admin/reset?rule=per-ip&key=203.0.113.7, or with
	// &api_key= for the per-key rule. Loopback only; put real
	// authentication in front of anything like it.
	mux.HandleFunc("POST /admin/reset", func(w http.ResponseWriter, r *http.Request) {
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err != nil || !ap.Addr().IsLoopback() {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		q := r.URL.Query()
		var err error
		if k := q.Get("api_key"); k != "" {
			probe, _ := http.NewRequestWithContext(r.Context(), "GET", "/", nil)
			probe.Header.Set("X-API-Key", k)
			err = mw.ResetRequest(r.Context(), q.Get("rule"), probe)
		} else {
			err = mw.Reset(r.Context(), q.Get("rule"), q.Get("key"))
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, "reset")
	})
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
