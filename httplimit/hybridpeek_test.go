package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestHybridCostAboveBurstReportsTheQuota is TestCostAboveBurstReportsTheQuota
// with the hybrid limiter: it had no Peek, so a request costing more than
// the burst got r=0;t=0 ("nothing left, full now") for a key with 10 of 10
// left.
func TestHybridCostAboveBurstReportsTheQuota(t *testing.T) {
	hyb := newHybrid(t, redistest.Standalone(t))
	m, err := New([]Rule{{Name: "up", Limiter: hyb, Limit: hybridlimit.PerMinute(10), Key: Static("k"),
		CostFunc: func(*http.Request) int64 { return 11 }}})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	m.Handler(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("POST", "/", nil))
	_, state := fields(t, w.Header())
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "" || len(state) != 1 || state[0].Params["r"] != 10 {
		t.Errorf("status %d, Retry-After %q, RateLimit %q; want 429, none, r=10", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
}
