package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
)

// An in-process limit of two requests a minute per client IP. With Redis,
// use a started *sync.Limiter (hybrid) or a *global.Limiter (exact) as the
// Limiter instead, unchanged otherwise. RateLimit's t is the seconds until
// more quota is available: a token comes back every 30 seconds.
func ExampleMiddleware_Handler() {
	tbl, err := local.NewTable()
	if err != nil {
		panic(err)
	}
	perProcess, err := rules.NewLocal(tbl)
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.New([]httplimit.Rule{
		{Name: "per-ip", Limiter: perProcess, Limit: hybridlimit.PerMinute(2), Key: httplimit.IP(nil)},
	})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	}))
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Println(w.Code)
		for _, name := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := w.Header().Get(name); v != "" {
				fmt.Printf("  %s: %s\n", name, v)
			}
		}
	}
	// Output:
	// 200
	//   RateLimit-Policy: "per-ip";q=2;w=60
	//   RateLimit: "per-ip";r=1;t=30
	// 200
	//   RateLimit-Policy: "per-ip";q=2;w=60
	//   RateLimit: "per-ip";r=0;t=30
	// 429
	//   RateLimit-Policy: "per-ip";q=2;w=60
	//   RateLimit: "per-ip";r=0;t=30
	//   Retry-After: 30
}
