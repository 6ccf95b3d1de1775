package httplimit

import (
	"context"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/rules"
)

// TestRejectedRequestCostsNothing hammers a per-IP and a per-API-key rule
// from 16 goroutines, one client address and one API key over its quota,
// on a real Redis (both rules exact) and in process (both local). Limits
// that refill an hour apart make the counts exact: the key's 500 are
// admitted, and the per-IP rule ends with exactly the 500 those spent
// taken from its 2,000, the rest given back under contention, so a
// second key from the same address still gets its 500. Every rule spent
// its quota on requests the other denied: the per-IP rule was drained to
// 0 by the first key's denied requests and the second key got nothing.
func TestRejectedRequestCostsNothing(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	exact, err := global.New(rdb, global.GCRA, global.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	inProcess := newLocal(t)
	// Limits of a day: no token refills while the test runs, however
	// slow the machine (2000 an hour would refill one every 1.8 s).
	day := 24 * time.Hour
	perIP := hybridlimit.Limit{Rate: 2000, Period: day, Burst: 2000}
	perKey := hybridlimit.Limit{Rate: 500, Period: day, Burst: 500}
	for _, tt := range []struct {
		name string
		l    hybridlimit.Limiter
	}{{"global", exact}, {"local", inProcess}} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New([]Rule{
				{Name: "per-ip", Limiter: tt.l, Limit: perIP, Key: IP(nil)},
				{Name: "per-key", Limiter: tt.l, Limit: perKey, Key: Header("X-Key")},
			})
			if err != nil {
				t.Fatal(err)
			}
			hammer := func(key string, n int) int64 {
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range n / 16 {
							r := httptest.NewRequest("GET", "/", nil)
							r.RemoteAddr = "192.0.2.1:1234"
							r.Header.Set("X-Key", key)
							d, err := m.Check(r)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed() {
								admitted.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				return admitted.Load()
			}
			if got := hammer("a", 3200); got != perKey.Burst {
				t.Errorf("key a: %d of 3,200 admitted, want %d", got, perKey.Burst)
			}
			ipLeft := peek(t, tt.l, "per-ip|192.0.2.1", perIP)
			if ipLeft != perIP.Burst-perKey.Burst {
				t.Errorf("per-ip has %d left after %d admitted, want %d", ipLeft, perKey.Burst, perIP.Burst-perKey.Burst)
			}
			if got := hammer("b", 1600); got != perKey.Burst {
				t.Errorf("key b from the same address: %d of 1,600 admitted, want %d", got, perKey.Burst)
			}
			s := m.Stats().Rules[0].Outcomes
			if s[rules.OutcomeAllowed] != 2*uint64(perKey.Burst) || s[rules.OutcomeRefunded] == 0 || s[rules.OutcomeUnrefunded] != 0 {
				t.Errorf("per-ip outcomes %v: want %d allowed, the rest refunded", s, 2*perKey.Burst)
			}
		})
	}
}

// peek returns what key has left under limit in l, a global.Limiter or a
// Local.
func peek(t *testing.T, l hybridlimit.Limiter, key string, limit hybridlimit.Limit) int64 {
	t.Helper()
	p, ok := l.(interface {
		Peek(context.Context, string, hybridlimit.Limit) (hybridlimit.Result, error)
	})
	if !ok {
		t.Fatalf("%T cannot peek", l)
	}
	r, err := p.Peek(t.Context(), key, limit)
	if err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}
