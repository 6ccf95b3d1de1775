package rls

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a /json request body.
const maxJSONBody = 1 << 20

// httpHandler serves the main HTTP port: /healthcheck and /json.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := s.healthy(); !ok {
			http.Error(w, why, http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "OK")
	})
	mux.Handle("/json", JSONHandler(s.svc, s.log))
	return mux
}

// JSONHandler serves ShouldRateLimit over HTTP/1 for clients without gRPC:
// a POSTed RateLimitRequest in protojson, answered with the response in
// protojson, status 200 for OK and 429 for OVER_LIMIT; 400 for a body or
// request it cannot read, 500 (and 503 when the store could not be asked)
// with the error as text. A request's W3C trace context (traceparent) is
// the parent of its span when tracing is on.
func JSONHandler(svc *Service, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a RateLimitRequest as JSON", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var req rlspb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		if svc.tracer != nil {
			ctx = svc.tracer.props.Extract(ctx, propagation.HeaderCarrier(r.Header))
		}
		resp, err := svc.ShouldRateLimit(ctx, &req)
		if err != nil {
			st, _ := status.FromError(err)
			code := http.StatusInternalServerError
			switch st.Code() {
			case codes.InvalidArgument:
				code = http.StatusBadRequest
			case codes.Unavailable:
				code = http.StatusServiceUnavailable
			}
			http.Error(w, st.Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			log.Error("rls: /json: marshal", "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}

// debugHandler serves the debug port: the loaded rules, the counters, the
// Prometheus metrics and pprof.
func (s *Server) debugHandler() http.Handler {
	mux := http.NewServeMux()
	endpoints := map[string]string{
		"/rlconfig":     "the rules in use, one a line",
		"/stats":        "the counters, one a line",
		"/metrics":      "the counters for Prometheus",
		"/debug/pprof/": "pprof profiles",
	}
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, r *http.Request) {
		if c := s.svc.Config(); c != nil {
			_, _ = io.WriteString(w, c.Dump())
		}
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, s.statsText())
	})
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		var paths []string
		for p := range endpoints {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			fmt.Fprintf(w, "%s: %s\n", p, endpoints[p])
		}
	})
	return mux
}

// statsText renders the counters with the reference's stat names.
func (s *Server) statsText() string {
	var lines []string
	add := func(name string, v uint64) { lines = append(lines, fmt.Sprintf("%s: %d", name, v)) }
	for _, r := range s.svc.RuleStats() {
		base := "ratelimit.service.rate_limit." + r.Domain
		if r.Key == "" && r.DomainNotFound > 0 {
			add(base+".domain_not_found", r.DomainNotFound)
			continue
		}
		base += "." + r.Key
		add(base+".total_hits", r.TotalHits)
		add(base+".over_limit", r.OverLimit)
		add(base+".near_limit", r.NearLimit)
		add(base+".within_limit", r.WithinLimit)
		add(base+".shadow_mode", r.ShadowMode)
	}
	st := s.svc.Stats()
	add("ratelimit.service.config_load_success", st.ConfigLoadSuccess)
	add("ratelimit.service.config_load_error", st.ConfigLoadError)
	add("ratelimit.service.call.should_rate_limit.redis_error", st.RedisError)
	add("ratelimit.service.call.should_rate_limit.service_error", st.ServiceError)
	add("ratelimit.service.global_shadow_mode", st.GlobalShadowMode)
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}
