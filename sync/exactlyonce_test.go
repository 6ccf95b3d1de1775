package sync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/faultproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestExactlyOnceUnderFaults puts a fault-injecting proxy between each
// limiter and Redis. Script calls are run twice, have their replies lost
// after they ran (so go-redis retries them), or answer too late (so the
// limiter gives up on a call that did run). The limiters together must
// admit no more than the budget, and once they close, the tokens admitted
// plus those left in Redis must be the budget exactly: nothing counted
// twice, nothing lost.
func TestExactlyOnceUnderFaults(t *testing.T) {
	defaultBuildOnly(t)
	for _, mode := range []hlsync.Mode{hlsync.Reserve, hlsync.Optimistic} {
		for _, f := range callFaults {
			t.Run(fmt.Sprintf("%v/%s", mode, f.name), func(t *testing.T) {
				redistest.NoLeaks(t)
				srv := redistest.StandaloneServer(t)
				prefix := redistest.Prefix(t)
				const burst, n = 2000, 3
				limit := frozen(burst)
				ls, proxies := faultyFleet(t, srv, prefix, mode, n)
				// A fault on the next script call of every instance, renewed
				// every 20ms: most rounds meet one, and the budget can
				// still drain.
				stop := make(chan struct{})
				injected := make(chan struct{})
				go func() {
					defer close(injected)
					tick := time.NewTicker(20 * time.Millisecond)
					defer tick.Stop()
					for {
						for _, p := range proxies {
							f.apply(p)
						}
						select {
						case <-stop:
							for _, p := range proxies {
								clearFaults(p)
							}
							return
						case <-tick.C:
						}
					}
				}()
				admitted, err := hammer(ls, 4, "hot", limit, burst, 300*time.Millisecond)
				close(stop)
				<-injected
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range ls {
					if err := l.Close(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				total := sum(admitted)
				left := remaining(t, srv.Client(t), prefix, "hot", limit, 64)
				var hit int64
				for _, p := range proxies {
					s := p.Stats()
					hit += s.Duplicated + s.Dropped + s.Late
				}
				t.Logf("admitted %d (per instance %v), %d left, %d faults injected", total, admitted, left, hit)
				if total > burst {
					t.Errorf("admitted %d, budget %d", total, burst)
					for _, l := range ls {
						b, al := l.Keys("hot")
						c := srv.Client(t)
						t.Logf("%s bucket and ledgers %v allowances %v", l.InstanceID(), c.HGetAll(context.Background(), b).Val(), c.HGetAll(context.Background(), al).Val())
					}
				}
				if total+left != burst {
					t.Errorf("admitted %d + left %d = %d, want %d", total, left, total+left, burst)
				}
				for _, l := range ls {
					t.Logf("%s: %+v", l.InstanceID(), l.Stats())
					if s := l.Stats(); s.Owed != 0 {
						t.Errorf("%s: Owed = %d after Close", l.InstanceID(), s.Owed)
					}
				}
			})
		}
	}
}

// callFaults are the faults the exactly-once tests inject into script
// calls: a call run twice, a reply lost after the call ran (go-redis
// retries it), a reply too late (the limiter gave up on a call that ran).
var callFaults = []struct {
	name  string
	apply func(p *faultproxy.Proxy)
}{
	{"duplicated", func(p *faultproxy.Proxy) { p.DuplicateRequests(1) }},
	{"dropped", func(p *faultproxy.Proxy) { p.DropReplies(1) }},
	{"late", func(p *faultproxy.Proxy) { p.LateReplies(1, 120*time.Millisecond) }},
}

// clearFaults stops p injecting any of callFaults.
func clearFaults(p *faultproxy.Proxy) {
	p.DuplicateRequests(0)
	p.DropReplies(0)
	p.LateReplies(0, 0)
}

// faultyFleet starts n limiters in mode sharing prefix on srv, each
// through a proxy of its own that can inject faults into script calls,
// with a 50 ms sync interval and FailClosed (so that every admission is
// Redis's). Optimistic ones get an overshoot budget of 0: without one,
// allowances held at once overdraw the bucket and the overdraft past a
// burst is forgiven (design 6.3), and admissions are not exact.
func faultyFleet(t *testing.T, srv *redistest.Server, prefix string, mode hlsync.Mode, n int) ([]*hlsync.Limiter, []*faultproxy.Proxy) {
	t.Helper()
	ls := make([]*hlsync.Limiter, n)
	proxies := make([]*faultproxy.Proxy, n)
	for i := range n {
		p := faultproxy.Start(t, srv.Addr)
		p.TargetCommands("EVALSHA", "EVAL")
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, ReadTimeout: 100 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		opts := []hlsync.Option{hlsync.WithPrefix(prefix), hlsync.WithInstanceID(fmt.Sprintf("i%d", i)),
			hlsync.WithMode(mode), hlsync.WithSyncInterval(50*time.Millisecond, 0.1),
			hlsync.WithFailurePolicy(hybridlimit.FailClosed)}
		if mode == hlsync.Optimistic {
			opts = append(opts, hlsync.WithOvershootBudget(0))
		}
		l, err := hlsync.New(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		ls[i], proxies[i] = l, p
	}
	return ls, proxies
}
