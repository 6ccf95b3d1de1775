package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/sharding"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestSplitKeyCostAbovePartBurst: a rule of burst 10 on a key split 2
// ways (parts of burst 5) gets requests costing 6, within the rule's burst.
// The limiter returns ErrCostExceedsBurst, which the middleware treated as
// a limiter failure: with the default OnError (FailOpen) every such request
// was admitted and nothing spent, so the key was not limited at all.
func TestSplitKeyCostAbovePartBurst(t *testing.T) {
	rdb := redistest.Standalone(t)
	limit := hybridlimit.PerMinute(10)
	g, err := sharding.NewGlobal(rdb, global.GCRA, sharding.Suffix, sharding.Fixed(2), sharding.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	hyb, err := hlsync.New(rdb, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithMaxWait(2*time.Second),
		hlsync.WithSyncInterval(50*time.Millisecond, 0.1), hlsync.WithSplitKeys(func(string, hybridlimit.Limit) int { return 2 }))
	if err != nil {
		t.Fatal(err)
	}
	if err := hyb.Start(); err != nil {
		t.Fatal(err)
	}
	defer hyb.Close(context.Background())
	for name, lim := range map[string]hybridlimit.Limiter{"sharding.Global": g, "sync.WithSplitKeys": hyb} {
		t.Run(name, func(t *testing.T) {
			m, err := New([]Rule{{Name: "up", Limiter: lim, Limit: limit, Key: Static("k"),
				CostFunc: func(*http.Request) int64 { return 6 }}})
			if err != nil {
				t.Fatal(err)
			}
			passed := int64(0)
			for range 20 {
				w := httptest.NewRecorder()
				m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, httptest.NewRequest("POST", "/", nil))
				if w.Code == http.StatusOK {
					passed += 6
				}
			}
			t.Logf("admitted %d tokens of cost-6 requests under a burst of %d per minute; stats %+v", passed, limit.Burst, m.Stats())
			if passed > limit.Burst {
				t.Errorf("admitted %d tokens in a moment under %v: requests above a part's burst pass the limit", passed, limit)
			}
		})
	}
}
