package global

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

const (
	hammerClients    = 8
	hammerGoroutines = 8 // per client
)

// hammerLimit admits 1000 and refills one per 3.7 days (Period is the
// longest Validate allows), so nothing refills during a test: every
// algorithm must admit exactly 1000.
var hammerLimit = hybridlimit.Limit{Rate: 1000, Period: hybridlimit.MaxRefill, Burst: 1000}

// hammer runs attempts decisions of the given costs on one key from
// hammerClients clients x hammerGoroutines goroutines, and returns the
// admitted count and cost.
func hammer(t *testing.T, dial func(testing.TB) redis.UniversalClient, alg Algorithm, p string, key string, attempts int, cost func(i int) int64) (admitted, spent int64) {
	t.Helper()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		nAdm atomic.Int64
		nSp  atomic.Int64
	)
	for range hammerClients {
		l, err := New(dial(t), alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		for range hammerGoroutines {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= attempts {
						return
					}
					c := cost(i)
					r, err := l.AllowN(t.Context(), key, hammerLimit, c)
					if err != nil {
						t.Errorf("AllowN: %v", err)
						return
					}
					if r.Allowed {
						nAdm.Add(1)
						nSp.Add(c)
					}
				}
			})
		}
	}
	wg.Wait()
	return nAdm.Load(), nSp.Load()
}

func skipNearWindowEnd(t *testing.T) {
	// The window algorithms align windows to the epoch; a hammer that
	// straddled a boundary would rightly admit more. With a 366-day
	// period that needs to run within a minute of one.
	p := hammerLimit.Period
	if left := p - time.Duration(time.Now().UnixNano())%p; left < time.Minute {
		t.Skipf("a window boundary is %v away", left)
	}
}

func TestLimiterHammer(t *testing.T) {
	redistest.NoLeaks(t)
	skipNearWindowEnd(t)
	for _, top := range topologies {
		t.Run(top.Name, func(t *testing.T) {
			p := redistest.Prefix(t)
			for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog} {
				t.Run(alg.String(), func(t *testing.T) {
					const attempts = 2500
					got, _ := hammer(t, top.Dial, alg, p, "hot{key}", attempts, func(int) int64 { return 1 })
					if got != hammerLimit.Burst {
						t.Errorf("%d goroutines made %d attempts: %d admitted, want exactly %d",
							hammerClients*hammerGoroutines, attempts, got, hammerLimit.Burst)
					}
					// Weighted: costs 1, 2, 3 in turn. Nothing refills, so
					// what was spent plus what remains is the burst, and the
					// last denials leave less than the largest cost.
					_, spent := hammer(t, top.Dial, alg, p, "weighted", 1500, func(i int) int64 { return int64(1 + i%3) })
					l, err := New(top.Dial(t), alg, WithPrefix(p))
					if err != nil {
						t.Fatal(err)
					}
					r, err := l.Peek(t.Context(), "weighted", hammerLimit)
					if err != nil {
						t.Fatal(err)
					}
					if spent+r.Remaining != hammerLimit.Burst || r.Remaining >= 3 {
						t.Errorf("weighted: spent %d, %d remaining; want a sum of %d and under 3 remaining",
							spent, r.Remaining, hammerLimit.Burst)
					}
				})
			}
			checkTTLs(t, top.Dial(t), p)
		})
	}
}
