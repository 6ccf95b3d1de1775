package rls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/metrics"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// HealthName is the service name the gRPC health service reports, as the
// reference registers it; the empty name reports the same.
const HealthName = "ratelimit"

// Server is the whole service: the gRPC API, the HTTP API (/json,
// /healthcheck), the debug listener (/rlconfig, /stats, /metrics,
// /debug/pprof), the rules watcher and the health check of Redis.
//
// NewServer connects nothing and starts nothing; Run does all of it and
// owns every goroutine until its ctx ends.
type Server struct {
	set      Settings
	log      *slog.Logger
	svc      *Service
	reg      *prometheus.Registry
	health   *health.Server
	redisOK  atomic.Bool // Redis answered the last ping
	reached  atomic.Bool // Redis has answered since start
	draining atomic.Bool
	clients  []redis.UniversalClient
	xds      *xdsSource // nil: the rules come from the runtime directory
	addrs    struct {
		grpc, http, debug atomic.Value // string
	}
}

// NewServer builds a Server from settings: the Redis clients, the limiter
// of the chosen mode, the Service, and the metrics registry.
func NewServer(set Settings, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{set: set, log: log, reg: prometheus.NewRegistry(), health: health.NewServer()}
	svc := &Service{
		rules: newStatSet(set.MaxStatKeys),
		log:   log,
		opt: serviceOptions{
			globalShadow: set.GlobalShadow, countAll: set.CountEveryHit, globalQuota: set.GlobalQuota, headers: set.Headers,
			limitHeader: set.LimitHeader, remainHeader: set.RemainingHeader, resetHeader: set.ResetHeader,
			nearRatio: set.NearLimitRatio,
		},
	}
	tlsConf, err := redisTLS(set)
	if err != nil {
		return nil, err
	}
	main, err := newRedis(set.Redis, tlsConf, set.MaxWait)
	if err != nil {
		return nil, err
	}
	s.clients = append(s.clients, main)
	var perSecond redis.UniversalClient
	if set.RedisPerSecond != nil {
		if perSecond, err = newRedis(*set.RedisPerSecond, tlsConf, set.MaxWait); err != nil {
			_ = main.Close()
			return nil, err
		}
		s.clients = append(s.clients, perSecond)
	}
	switch set.Mode {
	case ModeFixedWindow:
		svc.backend = &fixedBackend{
			main: main, perSecond: perSecond, prefix: set.CacheKeyPrefix,
			jitter: int64(set.ExpirationJitter / time.Second), stopWhenOver: set.StopIncrementWhenOver,
			nearRatio: set.NearLimitRatio, policy: set.Policy, maxWait: set.MaxWait, now: time.Now, fallbacks: &svc.c.failurePolicy,
		}
	default:
		h, err := s.hybrid(main, perSecond, &svc.c.failurePolicy)
		if err != nil {
			s.closeClients()
			return nil, err
		}
		svc.backend = h
	}
	s.svc = svc
	if set.ConfigType == ConfigXDS {
		if s.xds, err = newXDSSource(set.XDS, set.Runtime.Merge, svc, log, s.updateHealth, &svc.c.certs); err != nil {
			s.closeClients()
			return nil, err
		}
	}
	mapping, note, err := metricMappingFrom(set)
	if err != nil {
		s.closeClients()
		return nil, err
	}
	if note != "" {
		log.Warn("rls: " + note)
	}
	col, err := NewCollector(svc, prometheus.Labels(set.ExtraTags), mapping)
	if err != nil {
		s.closeClients()
		return nil, err
	}
	// The Go runtime's and the process's metrics, which dashboards of the
	// reference read (process_resident_memory_bytes, go_memstats_*).
	s.reg.MustRegister(col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s, nil
}

// limiterPolicy is the limiter's failure policy for each of the
// service's: under error the limiter denies, and the service answers its
// denials UNAVAILABLE (hybridBackend).
func limiterPolicy(p hybridlimit.FailurePolicy) hybridlimit.FailurePolicy {
	if p == hybridlimit.FailError {
		return hybridlimit.FailClosed
	}
	return p
}

// hybrid builds the hybrid backend: one limiter per Redis.
func (s *Server) hybrid(main, perSecond redis.UniversalClient, fallbacks *atomic.Uint64) (*hybridBackend, error) {
	h := &hybridBackend{policy: s.set.Policy, nearRatio: s.set.NearLimitRatio, fallbacks: fallbacks, charge: s.set.CountEveryHit}
	build := func(rdb redis.UniversalClient, name string) (*hlsync.Limiter, error) {
		mode := hlsync.Reserve
		if s.set.Optimistic {
			mode = hlsync.Optimistic
		}
		opts := []hlsync.Option{
			hlsync.WithMode(mode), hlsync.WithSyncInterval(s.set.SyncInterval, 0.1),
			hlsync.WithMaxWait(s.set.MaxWait), hlsync.WithFailurePolicy(limiterPolicy(s.set.Policy)),
			hlsync.WithPrefix(s.set.CacheKeyPrefix + "hl:"), hlsync.WithLogger(s.log),
		}
		if s.set.InstanceID != "" {
			opts = append(opts, hlsync.WithInstanceID(s.set.InstanceID+"-"+name))
		}
		l, err := hlsync.New(rdb, opts...)
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		c, err := metrics.NewHybridCollector(l, metrics.WithConstLabels(prometheus.Labels{"store": name}))
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		if err := s.reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		h.stores = append(h.stores, store{ping: l.Ping, close: l.Close})
		return l, nil
	}
	l, err := build(main, "main")
	if err != nil {
		return nil, err
	}
	h.main = l
	if perSecond != nil {
		if h.perSecond, err = build(perSecond, "per_second"); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// starter is a limiter with a sync loop to start.
type starter interface{ Start() error }

// Service returns the service the Server serves.
func (s *Server) Service() *Service { return s.svc }

// Registry returns the Prometheus registry /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Run loads the rules, listens, serves and watches until ctx ends, then
// fails the health check, stops taking calls, finishes those in flight,
// hands back the limiter's unused allowance and closes the Redis clients.
// It returns the first error that stopped it, nil after ctx ended.
func (s *Server) Run(ctx context.Context) error {
	defer s.closeClients()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.svc.backend.close(cctx); err != nil {
			s.log.Warn("rls: closing the limiter", "err", err)
		}
	}()
	if h, ok := s.svc.backend.(*hybridBackend); ok {
		for _, d := range []decider{h.main, h.perSecond} {
			if st, ok := d.(starter); ok {
				if err := st.Start(); err != nil {
					return fmt.Errorf("rls: %w", err)
				}
			}
		}
	}
	if s.set.Tracing.Enabled {
		tr, err := newTracer(ctx, s.set.Tracing)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tr.shutdown(sctx); err != nil {
				s.log.Warn("rls: sending the last spans", "err", err)
			}
		}()
		s.svc.tracer = tr
		s.log.Info("rls: tracing", "protocol", s.set.Tracing.Protocol, "service", s.set.Tracing.ServiceName, "sampling_rate", s.set.Tracing.SamplingRate)
	}
	var rl *reloader
	if s.xds == nil {
		rl = &reloader{rt: s.set.Runtime, svc: s.svc, log: s.log, loaded: s.updateHealth}
		rl.reload()
	}
	s.updateHealth()

	grpcSrv, err := s.grpcServer()
	if err != nil {
		return err
	}
	grpcLis, err := s.listenGRPC()
	if err != nil {
		return err
	}
	httpLis, err := net.Listen("tcp", net.JoinHostPort(s.set.Host, strconv.Itoa(s.set.Port)))
	if err != nil {
		_ = grpcLis.Close()
		return fmt.Errorf("rls: http: %w", err)
	}
	debugLis, err := net.Listen("tcp", net.JoinHostPort(s.set.DebugHost, strconv.Itoa(s.set.DebugPort)))
	if err != nil {
		_ = grpcLis.Close()
		_ = httpLis.Close()
		return fmt.Errorf("rls: debug: %w", err)
	}
	httpSrv := &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second}
	debugSrv := &http.Server{Handler: s.debugHandler(), ReadHeaderTimeout: 10 * time.Second}
	servers := []*http.Server{httpSrv, debugSrv}
	listeners := []net.Listener{httpLis, debugLis}
	if s.set.Prometheus {
		l, err := net.Listen("tcp", s.set.PrometheusAddr)
		if err != nil {
			_ = grpcLis.Close()
			_ = httpLis.Close()
			_ = debugLis.Close()
			return fmt.Errorf("rls: prometheus: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle(s.set.PrometheusPath, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
		servers = append(servers, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, l)
	}
	s.addrs.grpc.Store(grpcLis.Addr().String())
	s.addrs.http.Store(httpLis.Addr().String())
	s.addrs.debug.Store(debugLis.Addr().String())
	s.log.Info("rls: listening", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(),
		"debug", debugLis.Addr().String(), "mode", s.set.Mode.String(), "failure_policy", s.set.Policy.String(),
		"config", s.set.ConfigType)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := grpcSrv.Serve(grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("rls: grpc: %w", err)
		}
		return nil
	})
	for i, srv := range servers {
		g.Go(func() error {
			if err := srv.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("rls: http: %w", err)
			}
			return nil
		})
	}
	if rl != nil {
		g.Go(func() error { return rl.watch(gctx, s.set.ConfigPoll) })
	} else {
		g.Go(func() error { return s.xds.run(gctx) })
	}
	g.Go(func() error { s.healthLoop(gctx); return nil })
	g.Go(func() error {
		<-gctx.Done()
		s.draining.Store(true)
		s.setServing(false)
		stopped := make(chan struct{})
		go func() { grpcSrv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			grpcSrv.Stop()
			<-stopped
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, srv := range servers {
			_ = srv.Shutdown(sctx)
		}
		return nil
	})
	return g.Wait()
}

// Addrs returns the addresses Run listens on, once it does ("" before).
func (s *Server) Addrs() (grpcAddr, httpAddr, debugAddr string) {
	get := func(v *atomic.Value) string {
		a, _ := v.Load().(string)
		return a
	}
	return get(&s.addrs.grpc), get(&s.addrs.http), get(&s.addrs.debug)
}

func (s *Server) listenGRPC() (net.Listener, error) {
	if s.set.GRPCUDS != "" {
		_ = os.Remove(s.set.GRPCUDS) // a socket left by a process that died
		l, err := net.Listen("unix", s.set.GRPCUDS)
		if err != nil {
			return nil, fmt.Errorf("rls: grpc: %w", err)
		}
		return l, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(s.set.GRPCHost, strconv.Itoa(s.set.GRPCPort)))
	if err != nil {
		return nil, fmt.Errorf("rls: grpc: %w", err)
	}
	return l, nil
}

func (s *Server) grpcServer() (*grpc.Server, error) {
	opts := []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: s.set.GRPCMaxConnAge, MaxConnectionAgeGrace: s.set.GRPCMaxConnAgeGrace,
	})}
	if s.set.GRPCTLSCert != "" {
		kp, err := newKeyPair(s.set.GRPCTLSCert, s.set.GRPCTLSKey, s.log, &s.svc.c.certs)
		if err != nil {
			return nil, fmt.Errorf("rls: GRPC_SERVER_TLS_CERT/KEY: %w", err)
		}
		conf := &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get(), nil },
		}
		if s.set.GRPCClientCA != "" {
			pool, err := certPool(s.set.GRPCClientCA)
			if err != nil {
				return nil, fmt.Errorf("rls: GRPC_CLIENT_TLS_CACERT: %w", err)
			}
			conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
			if s.set.GRPCClientSAN != "" {
				conf.VerifyPeerCertificate = requireSAN(s.set.GRPCClientSAN)
			}
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(conf)))
	}
	if s.svc.tracer != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(s.svc.tracer.unary))
	}
	g := grpc.NewServer(opts...)
	rlspb.RegisterRateLimitServiceServer(g, s.svc)
	healthpb.RegisterHealthServer(g, s.health)
	return g, nil
}

// healthLoop pings Redis every second and keeps the health status up to
// date, until ctx ends.
func (s *Server) healthLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s.pingRedis(ctx)
		s.updateHealth()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) pingRedis(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := s.svc.backend.ping(pctx)
	if ctx.Err() != nil {
		return
	}
	ok := err == nil
	if was := s.redisOK.Swap(ok); was != ok || (!ok && !s.reached.Load()) {
		if ok {
			s.log.Info("rls: redis answers")
		} else {
			s.log.Warn("rls: redis does not answer", "err", err, "failure_policy", s.set.Policy.String())
		}
	}
	if ok {
		s.reached.Store(true)
	}
}

// healthy reports whether the service should take traffic, and why not.
func (s *Server) healthy() (bool, string) {
	switch {
	case s.draining.Load():
		return false, "shutting down"
	case s.svc.Config() == nil && !s.set.ForceStart && s.xds != nil:
		return false, "no rules from the xDS server yet"
	case s.svc.Config() == nil && !s.set.ForceStart:
		return false, "no rules loaded"
	case s.set.HealthyWithConfig && (s.svc.Config() == nil || len(s.svc.Config().Domains()) == 0):
		return false, "no domain configured (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)"
	case !s.reached.Load():
		return false, "redis has not answered yet"
	case !s.redisOK.Load() && (s.set.RedisHealth || s.set.Policy == hybridlimit.FailError):
		return false, "redis does not answer"
	}
	return true, ""
}

func (s *Server) updateHealth() {
	ok, _ := s.healthy()
	s.setServing(ok && !s.draining.Load())
}

func (s *Server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(HealthName, st)
	s.health.SetServingStatus("", st)
}

func (s *Server) closeClients() {
	for _, c := range s.clients {
		_ = c.Close()
	}
	s.clients = nil
}

// newRedis builds a client from RedisSettings. Every call it makes is
// bounded by its context (the service's max wait on the request path), and
// none is retried: a retried increment would count twice.
func newRedis(r RedisSettings, tlsConf *tls.Config, maxWait time.Duration) (redis.UniversalClient, error) {
	user, pass := "", r.Auth
	if u, p, found := strings.Cut(r.Auth, ":"); found {
		user, pass = u, p
	}
	if !r.TLS {
		tlsConf = nil
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	switch r.Type {
	case "cluster":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: splitList(r.URL), Username: user, Password: pass, TLSConfig: tlsConf, PoolSize: r.PoolSize,
			DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true,
			MaxRetries: -1, MaxRedirects: 3, PoolTimeout: maxWait,
		}), nil
	case "sentinel":
		parts := splitList(r.URL)
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: parts[0], SentinelAddrs: parts[1:], SentinelPassword: r.SentinelAuth,
			Username: user, Password: pass, TLSConfig: tlsConf, PoolSize: r.PoolSize,
			DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true,
			MaxRetries: -1, PoolTimeout: maxWait,
		}), nil
	}
	if strings.HasPrefix(r.URL, "redis://") || strings.HasPrefix(r.URL, "rediss://") {
		o, err := redis.ParseURL(r.URL)
		if err != nil {
			return nil, fmt.Errorf("rls: REDIS_URL: %w", err)
		}
		o.PoolSize, o.DialTimeout, o.ReadTimeout, o.WriteTimeout = r.PoolSize, timeout, timeout, timeout
		o.ContextTimeoutEnabled, o.MaxRetries, o.PoolTimeout = true, -1, maxWait
		if o.TLSConfig != nil && tlsConf != nil {
			o.TLSConfig = tlsConf
		}
		return redis.NewClient(o), nil
	}
	return redis.NewClient(&redis.Options{
		Network: r.SocketType, Addr: r.URL, Username: user, Password: pass, TLSConfig: tlsConf, PoolSize: r.PoolSize,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true,
		MaxRetries: -1, PoolTimeout: maxWait,
	}), nil
}

// splitList splits a comma-separated list, dropping spaces and empty items.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}

// redisTLS builds the TLS config of the Redis clients from REDIS_TLS_*.
func redisTLS(set Settings) (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: set.TLSSkipVerify}
	if set.TLSClientCert != "" {
		cert, err := tls.LoadX509KeyPair(set.TLSClientCert, set.TLSClientKey)
		if err != nil {
			return nil, fmt.Errorf("rls: REDIS_TLS_CLIENT_CERT/KEY: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	if set.TLSCACert != "" {
		pool, err := certPool(set.TLSCACert)
		if err != nil {
			return nil, fmt.Errorf("rls: REDIS_TLS_CACERT: %w", err)
		}
		conf.RootCAs = pool
	}
	return conf, nil
}
