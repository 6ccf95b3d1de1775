package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
)

// BenchmarkMiddlewareHandler measures the middleware's own cost around
// in-process limiters: key extraction, three decisions, the fields.
func BenchmarkMiddlewareHandler(b *testing.B) {
	tbl, err := local.NewTable()
	if err != nil {
		b.Fatal(err)
	}
	loc, _ := NewLocal(tbl)
	huge := hybridlimit.PerSecond(1 << 40)
	m, err := New([]Rule{
		{Name: "per-ip", Limiter: loc, Limit: huge, Key: IP(nil)},
		{Name: "per-key", Limiter: loc, Limit: huge, Key: APIKey("X-API-Key")},
		{Name: "per-route", Limiter: loc, Limit: huge, Key: Join(Method(), Path())},
	})
	if err != nil {
		b.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, clients := range []int{1, 1000} {
		b.Run("clients="+strconv.Itoa(clients), func(b *testing.B) {
			reqs := make([]*http.Request, clients)
			for i := range reqs {
				reqs[i] = httptest.NewRequest("GET", "/items", nil)
				reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1"
				reqs[i].Header.Set("X-API-Key", "key-"+strconv.Itoa(i))
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
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
