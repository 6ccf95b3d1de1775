// Package metrics turns the plain counters of the hybrid limiter (package
// sync), of the HTTP middleware (package httplimit) and of the gRPC
// interceptors (package grpclimit) into Prometheus metrics. Each constructor returns a prometheus.Collector that reads one
// Stats snapshot per scrape; the library registers nothing, so register the
// collectors yourself, on the registry of your choice:
//
//	hc, err := metrics.NewHybridCollector(limiter)
//	if err != nil { ... }
//	mc, err := metrics.NewMiddlewareCollector(mw)   // or NewInterceptorCollector(ic)
//	if err != nil { ... }
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(hc, mc)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Metric names start with a namespace, "hybridlimit" unless WithNamespace
// says otherwise; WithConstLabels tells apart several limiters or
// middlewares in one registry. The collectors are safe for concurrent use.
//
// The exact limiters of package global keep no counters of their own: their
// decisions and errors appear in the middleware's metrics, labelled
// limiter="global".
package metrics
