package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
)

// BenchmarkMiddlewareHandler measures the middleware's own cost around
// in-process limiters: key extraction, three decisions, the fields. With
// next=mux it wraps a ServeMux, which it asks for each request's pattern
// (the mux routes the request again when it serves it).
func BenchmarkMiddlewareHandler(b *testing.B) {
	tbl, err := local.NewTable()
	if err != nil {
		b.Fatal(err)
	}
	loc, _ := rules.NewLocal(tbl)
	huge := hybridlimit.PerSecond(1 << 40)
	m, err := New([]Rule{
		{Name: "per-ip", Limiter: loc, Limit: huge, Key: IP(nil)},
		{Name: "per-key", Limiter: loc, Limit: huge, Key: APIKey("X-API-Key")},
		{Name: "per-route", Limiter: loc, Limit: huge, Key: rules.Join(Method(), Path())},
	})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /items", func(http.ResponseWriter, *http.Request) {})
	for _, next := range []struct {
		name string
		h    http.Handler
	}{
		{"func", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})},
		{"mux", mux},
	} {
		h := m.Handler(next.h)
		for _, clients := range []int{1, 1000} {
			b.Run("next="+next.name+"/clients="+strconv.Itoa(clients), func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					// Requests of its own: a router writes r.Pattern.
					reqs := make([]*http.Request, clients)
					for i := range reqs {
						reqs[i] = httptest.NewRequest("GET", "/items", nil)
						reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1"
						reqs[i].Header.Set("X-API-Key", "key-"+strconv.Itoa(i))
					}
					w := httptest.NewRecorder()
					i := 0
					for pb.Next() {
						clear(w.Header())
						h.ServeHTTP(w, reqs[i%clients])
						i++
					}
				})
			})
		}
	}
}

// BenchmarkTwoRules is the two-rule run on a real Redis: a per-IP rule of
// 2000/s on the hybrid limiter and a per-API-key rule of 500/s on an exact
// GCRA limiter, one client with one key, as many requests as 32 goroutines
// send through Check. It reports the admitted rate (the tightest limit,
// 500/s, plus its burst of 500 spread over the run) and the offered rate,
// for either order of the rules. Run it with -benchtime=5s:
//
//	go test -run '^$' -bench TwoRules -benchtime 5s ./httplimit/
func BenchmarkTwoRules(b *testing.B) {
	rdb := redistest.Standalone(b)
	hybrid := newHybrid(b, rdb)
	exact, err := global.New(rdb, global.GCRA, global.WithPrefix(redistest.Prefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	perIP := Rule{Name: "per-ip", Limiter: hybrid, Limit: hybridlimit.PerSecond(2000), Key: IP(nil)}
	perKey := Rule{Name: "per-key", Limiter: exact, Limit: hybridlimit.PerSecond(500), Key: Header("X-API-Key")}
	for _, order := range []struct {
		name  string
		rules []Rule
	}{{"ip-first", []Rule{perIP, perKey}}, {"key-first", []Rule{perKey, perIP}}} {
		b.Run(order.name, func(b *testing.B) {
			m, err := New(order.rules)
			if err != nil {
				b.Fatal(err)
			}
			var admitted atomic.Int64
			b.SetParallelism(16)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/", nil)
				r.RemoteAddr = "192.0.2.1:1"
				r.Header.Set("X-API-Key", order.name)
				for pb.Next() {
					d, err := m.Check(r)
					if err != nil {
						b.Error(err)
						return
					}
					if d.Allowed() {
						admitted.Add(1)
					}
				}
			})
			elapsed := time.Since(start).Seconds()
			b.ReportMetric(float64(admitted.Load())/elapsed, "admitted/s")
			b.ReportMetric(float64(b.N)/elapsed, "offered/s")
		})
	}
}

// BenchmarkRaiseLimit is the incident fix on a real Redis: a per-IP rule
// of 5 a minute on an exact GCRA limiter, exhausted, then raised to 2000/s
// by Reload. It reports how long after the reload the client's first
// request is admitted (a token of the new limit, 0.5ms) and how many are
// admitted in the first second after it (the new rate, 2000, less the
// tokens the exhausted key lacked).
//
//	go test -run '^$' -bench RaiseLimit -benchtime 5x ./httplimit/
func BenchmarkRaiseLimit(b *testing.B) {
	rdb := redistest.Standalone(b)
	exact, err := global.New(rdb, global.GCRA, global.WithPrefix(redistest.Prefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	rule := func(l hybridlimit.Limit) []Rule {
		return []Rule{{Name: "per-ip", Limiter: exact, Limit: l, Key: IP(nil)}}
	}
	var toFirst time.Duration
	var inSecond int64
	for i := range b.N {
		m, err := New(rule(hybridlimit.PerMinute(5)))
		if err != nil {
			b.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "198.51.100." + strconv.Itoa(i%250) + ":1"
		r.Header.Set("X-Run", strconv.Itoa(i))
		m.eng.Reset(b.Context(), "per-ip", "198.51.100."+strconv.Itoa(i%250))
		for range 6 {
			if _, err := m.Check(r); err != nil {
				b.Fatal(err)
			}
		}
		if err := m.Reload(rule(hybridlimit.PerSecond(2000))); err != nil {
			b.Fatal(err)
		}
		reload := time.Now()
		first := time.Duration(0)
		for time.Since(reload) < time.Second {
			d, err := m.Check(r)
			if err != nil {
				b.Fatal(err)
			}
			if d.Allowed() {
				if first == 0 {
					first = time.Since(reload)
				}
				inSecond++
			}
		}
		toFirst += first
	}
	b.ReportMetric(float64(toFirst.Microseconds())/float64(b.N), "us-to-first-admission")
	b.ReportMetric(float64(inSecond)/float64(b.N), "admitted-in-1s")
}
