package sync_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	stdsync "sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/sharding"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestChargeDebtDeniesEveryInstance charges one instance more than a
// frozen bucket holds, more than its burst: the charge lands whole (the
// bucket is short by every token admitted and charged, none forgiven in
// either mode), the charging instance reports the debt, and another
// instance is denied from its first message on, its ResetAfter the time
// the debt and the burst take to refill; both count the debt and their
// denials for it. The claim holds from the message Redis answers: on a
// machine too busy to answer a first fetch within the max wait the
// failure policy decides (design 6.6), or a charge's message goes with a
// later round, and the case starts again with new instances, five times at
// most.
func TestChargeDebtDeniesEveryInstance(t *testing.T) {
	redistest.NoLeaks(t)
	for _, mode := range []hlsync.Mode{hlsync.Reserve, hlsync.Optimistic} {
		t.Run(mode.String(), func(t *testing.T) {
			rdb := redistest.Standalone(t)
			for try := 1; !chargeDebt(t, rdb, mode); try++ {
				if try == 5 {
					t.Fatal("5 tries: Redis answered none within the max wait")
				}
				t.Logf("try %d: a call outlasted the max wait; again with new instances", try)
			}
		})
	}
}

// chargeDebt is a case of TestChargeDebtDeniesEveryInstance on its own
// prefix. It reports false, checking nothing more, when a call the case
// needs Redis to answer outlasted the max wait.
func chargeDebt(t *testing.T, rdb hybridlimit.Redis, mode hlsync.Mode) bool {
	prefix := redistest.Prefix(t)
	ls := newLimiters(t, 2, func() hybridlimit.Redis { return rdb }, hlsync.WithPrefix(prefix), hlsync.WithMode(mode))
	a, b := ls[0], ls[1]
	ctx := context.Background()
	limit := frozen(10)
	if r, err := a.Allow(ctx, "k", limit); err != nil || !r.Allowed {
		t.Fatalf("first request: %+v, %v", r, err)
	} else if r.Source == hybridlimit.SourceFallback {
		return false
	}
	r, err := a.Charge(ctx, "k", limit, 35)
	if err != nil {
		t.Fatal(err)
	}
	if r.Source == hybridlimit.SourceLocal {
		return false // the charge's message outlasted the max wait: a later round sends it
	}
	if !r.Allowed || r.Source != hybridlimit.SourceGlobal || r.Remaining != 0 || r.RetryAfter <= 0 {
		t.Errorf("charge of 35 on a burst of 10: %+v; want allowed, from Redis, nothing left, a wait", r)
	}
	if s := a.Stats(); s.Charged != 35 || s.Owed != 0 || s.Admitted != 36 {
		t.Errorf("Stats: Charged %d, Owed %d, Admitted %d; want 35, 0 (Redis took it), 36", s.Charged, s.Owed, s.Admitted)
	}
	// Denied, and told the bucket fills only once the debt is
	// repaid: 36 tokens' refill, 3.6 times a refill of the burst.
	if r, err := b.Allow(ctx, "k", limit); err == nil && r.Source == hybridlimit.SourceFallback {
		return false
	} else if err != nil || r.Allowed || r.ResetAfter < limit.Refill()*35/10 {
		t.Errorf("another instance, after the charge: %+v, %v; want denied, ResetAfter 3.6 x %v", r, err, limit.Refill())
	}
	// Both instances count the debt (26 past empty) and their denials
	// for it.
	if r, err := a.Allow(ctx, "k", limit); err != nil || r.Allowed {
		t.Errorf("the charging instance, after the charge: %+v, %v; want denied", r, err)
	}
	for i, l := range ls {
		if s := l.Stats(); s.Debt != 26 || s.DeniedDebt != 1 {
			t.Errorf("instance %d: Stats Debt %d, DeniedDebt %d; want 26 and 1", i, s.Debt, s.DeniedDebt)
		}
	}
	for _, l := range ls {
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := taken(t, rdb, prefix, "k", limit, 64); got != 36 {
		t.Errorf("the bucket is %d tokens short of full, want 36: one admitted, 35 charged", got)
	}
	return true
}

// TestChargeSplitKeyEveryPart charges a key split four ways more than it
// holds: each part is charged its share (sharding.Share), so every part
// is in debt and no instance admits the key, whichever part it turns to,
// and the parts' buckets are short by exactly what was admitted and
// charged.
func TestChargeSplitKeyEveryPart(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	split := hlsync.WithSplitKeys(func(string, hybridlimit.Limit) int { return 4 })
	ls := newLimiters(t, 3, func() hybridlimit.Redis { return rdb }, hlsync.WithPrefix(prefix), split)
	ctx := context.Background()
	limit := frozen(40) // parts of 10
	if r, err := ls[0].Allow(ctx, "k", limit); err != nil || !r.Allowed {
		t.Fatalf("first request: %+v, %v", r, err)
	}
	if _, err := ls[0].Charge(ctx, "k", limit, 102); err != nil { // shares 26, 26, 25, 25
		t.Fatal(err)
	}
	for i, l := range ls {
		for range 8 {
			if r, err := l.Allow(ctx, "k", limit); err != nil || r.Allowed {
				t.Fatalf("instance %d, after the charge: %+v, %v; want denied", i, r, err)
			}
		}
	}
	for _, l := range ls {
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var short []int64
	var sum int64
	for j := range 4 {
		bucket, _ := ls[0].PartKeys("k", j, 4, 0)
		full, err := rdb.HGet(ctx, bucket, "t").Float64()
		if err != nil {
			t.Fatal(err)
		}
		part := sharding.Part(limit, j, 4)
		n := int64(math.Round((full - float64(now.UnixMicro())) * float64(part.Rate) / float64(part.Period.Microseconds())))
		short = append(short, n)
		sum += n
		if n <= part.Burst {
			t.Errorf("part %d is %d short of full, not in debt past its burst of %d", j, n, part.Burst)
		}
	}
	if sum != 103 {
		t.Errorf("the parts are %v short of full, %d in all; want 103: one admitted, 102 charged", short, sum)
	}
}

// TestChargeRejects checks the charges refused with a clear error and
// nothing changed: a negative cost, a debt the bucket's times could not
// hold exactly, and any charge after Close; and that a charge of 0 changes
// nothing.
func TestChargeRejects(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	l, err := hlsync.New(rdb, hlsync.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := frozen(10) // a token every 36.6 days: 2^50us is 356.05 tokens' refill
	if _, err := l.Charge(ctx, "k", limit, -1); !errors.Is(err, hybridlimit.ErrInvalidCost) {
		t.Errorf("Charge(-1) = %v, want ErrInvalidCost", err)
	}
	if _, err := l.Charge(ctx, "k", limit, 357); !errors.Is(err, hybridlimit.ErrInvalidCost) {
		t.Errorf("Charge(357) = %v, want ErrInvalidCost", err)
	}
	if r, err := l.Charge(ctx, "k", limit, 0); err != nil || !r.Allowed {
		t.Errorf("Charge(0) = %+v, %v", r, err)
	}
	if s := l.Stats(); s.Charged != 0 || s.Owed != 0 || s.Admitted != 0 {
		t.Errorf("after refused charges: Charged %d, Owed %d, Admitted %d; want none", s.Charged, s.Owed, s.Admitted)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := taken(t, rdb, prefix, "k", limit, 64); got != 0 {
		t.Errorf("the bucket is %d tokens short after refused charges, want 0", got)
	}
	if _, err := l.Charge(ctx, "k", limit, 1); !errors.Is(err, hlsync.ErrClosed) {
		t.Errorf("Charge after Close = %v, want ErrClosed", err)
	}
}

// TestChargeExactlyOnceUnderFaults runs admissions and charges from three
// instances, each behind a proxy that duplicates script calls, drops their
// replies after they ran, or answers too late. Once the instances close,
// the frozen bucket must be short by exactly what they admitted and
// charged: no charge lost, none counted twice, and (Optimistic under a
// budget) no admission from an allowance granted before a debt forgiven.
func TestChargeExactlyOnceUnderFaults(t *testing.T) {
	defaultBuildOnly(t)
	for _, mode := range []hlsync.Mode{hlsync.Reserve, hlsync.Optimistic} {
		for _, f := range callFaults {
			t.Run(fmt.Sprintf("%v/%s", mode, f.name), func(t *testing.T) {
				redistest.NoLeaks(t)
				srv := redistest.StandaloneServer(t)
				prefix := redistest.Prefix(t)
				const burst, n, ops = 2000, 3, 60
				limit := frozen(burst)
				ls, proxies := faultyFleet(t, srv, prefix, mode, n)
				spent := make([]int64, n)
				var wg stdsync.WaitGroup
				for i, l := range ls {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(i), 1))
						ctx := context.Background()
						for range ops {
							f.apply(proxies[i])
							if r, err := l.Allow(ctx, "k", limit); err == nil && r.Allowed {
								spent[i]++
							}
							c := rng.Int64N(60)
							if _, err := l.Charge(ctx, "k", limit, c); err != nil {
								t.Errorf("%s: Charge(%d): %v", l.InstanceID(), c, err)
								return
							}
							spent[i] += c
						}
					})
				}
				wg.Wait()
				var hit int64
				for _, p := range proxies {
					clearFaults(p)
					s := p.Stats()
					hit += s.Duplicated + s.Dropped + s.Late
				}
				for _, l := range ls {
					if err := l.Close(context.Background()); err != nil {
						t.Fatal(err)
					}
					if s := l.Stats(); s.Owed != 0 {
						t.Errorf("%s: Owed %d after Close", l.InstanceID(), s.Owed)
					}
				}
				got := taken(t, srv.Client(t), prefix, "k", limit, 64)
				t.Logf("admitted and charged %d (per instance %v), %d faults injected", sum(spent), spent, hit)
				if got != sum(spent) {
					t.Errorf("the bucket is %d tokens short of full; the instances admitted and charged %d", got, sum(spent))
				}
			})
		}
	}
}

// chargeEnv carries a charge worker's configuration (chargeConfig), JSON.
const chargeEnv = "HYBRIDLIMIT_CHARGE_WORKER"

// chargeConfig is one charge worker's work: Requests requests on Key,
// Pace apart, each admitted on an estimate of Estimate and settled to an
// actual cost drawn from [MinActual, MaxActual]. The worker's Redis is the
// standalone server at Addr, or the cluster Addrs names.
type chargeConfig struct {
	Addr, Prefix, ID, Key string
	Addrs                 []string
	Limit                 hybridlimit.Limit
	Requests              int
	Estimate              int64
	MinActual, MaxActual  int64
	Pace                  time.Duration
	Seed                  uint64
	Out                   string
}

// debtAdmission is a request admitted inside the debt window of a charge.
type debtAdmission struct {
	ChargedAt, At, Repaid int64 // Unix ns: when the charge returned, the admission, the end of the window
	Source                string
}

// refund is tokens given back, at a time in Unix ns.
type refund struct{ At, Tokens int64 }

// chargeLog is what a charge worker did.
type chargeLog struct {
	Used     int64 // actual cost of the requests admitted, in all
	Net      int64 // what admission took: the estimates admitted less the refunds
	Admitted int64 // requests admitted
	InDebt   int64 // requests admitted before a debt its own charge found was repaid by refill
	// InDebtAt describes each of those admissions, and Refunds every
	// refund, for the log: tokens given back by any process repay a debt
	// sooner than refill alone.
	InDebtAt   []debtAdmission
	Refunds    []refund
	Stats      hlsync.Stats
	FirstError string
}

// chargeFleet runs three OS processes, each a hybrid limiter with the
// default options on the Redis client makes, admitting requests on cfg's key on an estimate
// and settling each to its actual cost (Charge the excess, or Refund the
// difference), fault called two seconds in if not nil. It holds them to
// the claims:
//   - every token used is in Redis exactly once: once they close, the time
//     the key's bucket is full has moved on by exactly the refill of what
//     they used (Redis's clock, so refill meanwhile cancels out; the bucket
//     is half spent before they start, so it never fills, which would
//     forget);
//   - what admission took (estimates less refunds) is at most B + r T over
//     the run, charges on top;
//   - no process admits a request while a debt its own charge found is
//     unpaid, by the charge's RetryAfter.
func chargeFleet(t *testing.T, client func() redis.UniversalClient, cfg chargeConfig, fault func()) {
	t.Helper()
	ctx := context.Background()
	limit := cfg.Limit
	start := time.Now()
	rdb := client()
	pre, err := hlsync.New(rdb, hlsync.WithPrefix(cfg.Prefix), hlsync.WithInstanceID("pre"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pre.Charge(ctx, cfg.Key, limit, limit.Burst/10); err != nil {
		t.Fatal(err)
	}
	if err := pre.Close(ctx); err != nil {
		t.Fatal(err)
	}
	full0 := fullAtUS(t, rdb, cfg.Prefix, cfg.Key)
	dir := t.TempDir()
	cfgs := make([]chargeConfig, 3)
	cmds := make([]*exec.Cmd, len(cfgs))
	for i := range cfgs {
		cfgs[i] = cfg
		cfgs[i].ID, cfgs[i].Seed, cfgs[i].Out = fmt.Sprintf("p%d", i), uint64(i), filepath.Join(dir, fmt.Sprintf("p%d.json", i))
		cmds[i] = startWorker(t, "TestChargeWorker", chargeEnv, cfgs[i])
	}
	if fault != nil {
		time.Sleep(2 * time.Second)
		fault()
	}
	var used, net int64
	logs := make([]chargeLog, len(cfgs))
	for i, cfg := range cfgs {
		if err := cmds[i].Wait(); err != nil {
			t.Fatalf("%s: %v", cfg.ID, err)
		}
		raw, err := os.ReadFile(cfg.Out)
		if err != nil {
			t.Fatal(err)
		}
		var log chargeLog
		if err := json.Unmarshal(raw, &log); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: admitted %d requests using %d, %d while its charge's debt was unpaid; charged %d, refunded %d; "+
			"rounds failed %d, admitted by the failure policy %d, denied for debt %d",
			cfg.ID, log.Admitted, log.Used, log.InDebt, log.Stats.Charged, log.Stats.Refunded,
			log.Stats.RoundErrors, log.Stats.FallbackAllowed, log.Stats.DeniedDebt)
		if log.FirstError != "" {
			t.Errorf("%s: %s", cfg.ID, log.FirstError)
		}
		if log.InDebt != 0 {
			t.Errorf("%s admitted %d requests while a debt its own charge found was unpaid", cfg.ID, log.InDebt)
		}
		used += log.Used
		net += log.Net
		logs[i] = log
	}
	for i, log := range logs {
		for _, a := range log.InDebtAt {
			var n, tokens int64
			for j, other := range logs {
				for _, r := range other.Refunds {
					if j != i && r.At >= a.ChargedAt && r.At <= a.At {
						n++
						tokens += r.Tokens
					}
				}
			}
			t.Logf("%s: admitted (source %s) %v after its charge, %v before the debt was repaid by refill; meanwhile the others refunded %d tokens in %d refunds",
				cfgs[i].ID, a.Source, time.Duration(a.At-a.ChargedAt), time.Duration(a.Repaid-a.At), tokens, n)
		}
	}
	span := time.Since(start)
	perToken := float64(limit.Period.Microseconds()) / float64(limit.Rate)
	got := int64(math.Round((fullAtUS(t, client(), cfg.Prefix, cfg.Key) - full0) / perToken))
	bound := float64(limit.Burst) + float64(limit.Rate)*span.Seconds()/limit.Period.Seconds()
	t.Logf("used %d in all; Redis counted %d; admission took %d of B + r T = %.0f over %v",
		used, got, net, bound, span.Round(time.Millisecond))
	if got != used {
		t.Errorf("Redis counted %d tokens; the processes used %d", got, used)
	}
	if float64(net) > bound {
		t.Errorf("admission took %d, over B + r T = %.0f", net, bound)
	}
}

// fullAtUS returns when key's bucket is full, in microseconds of Redis's
// clock: the sync script's field t of it, read as stored.
func fullAtUS(t *testing.T, rdb redis.UniversalClient, prefix, key string) float64 {
	t.Helper()
	l, err := hlsync.New(rdb, hlsync.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	bucket, _ := l.Keys(key)
	full, err := rdb.HGet(context.Background(), bucket, "t").Float64()
	if err != nil {
		t.Fatalf("field t of %s: %v", bucket, err)
	}
	return full
}

// TestChargeAcrossProcesses runs chargeFleet on one real Redis with the
// issue's key, 10,000 tokens a minute, estimates of 500 and actual costs
// of 100 to 2,000: the key is in debt most of the run.
func TestChargeAcrossProcesses(t *testing.T) {
	defaultBuildOnly(t)
	srv := redistest.StandaloneServer(t)
	chargeFleet(t, func() redis.UniversalClient { return srv.Client(t) }, chargeConfig{
		Addr: srv.Addr, Prefix: redistest.Prefix(t), Key: "tenant", Limit: hybridlimit.PerMinute(10_000),
		Requests: 150, Estimate: 500, MinActual: 100, MaxActual: 2000, Pace: 20 * time.Millisecond,
	}, nil)
}

// TestFleetFailoverCharge runs chargeFleet on a cluster whose master of
// the key is killed (SIGKILL) a third into the run, its replica promoted
// by the cluster a second or two later. What the instances admit and
// charge meanwhile is owed (the failure policy's default, FallbackLocal)
// and restated until the new master takes it, so the sums must still be
// exact. The key admits 200,000 tokens a minute, so that hundreds of
// requests are admitted and settled around the kill. Replication is
// asynchronous: a write the old master acknowledged and never sent on
// would be lost (design 6.3's L); on loopback the replica has every
// acknowledged write, and the test holds the sum exact.
func TestFleetFailoverCharge(t *testing.T) {
	defaultBuildOnly(t)
	if testing.Short() {
		t.Skip("several processes and a cluster for several seconds")
	}
	redistest.NoLeaksAfterKill(t)
	cl := redistest.NewClusterWith(t, "cluster-node-timeout 1000")
	prefix := redistest.Prefix(t)
	probe, err := hlsync.New(cl.Client(t), hlsync.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	bucket, _ := probe.Keys("tenant")
	master, _ := cl.SlotOwner(t, hybridlimit.Slot(bucket))
	// A new client at the end: one made before the kill may still route
	// the key to the dead master.
	chargeFleet(t, func() redis.UniversalClient { return cl.Client(t) }, chargeConfig{
		Addrs: cl.Addrs(), Prefix: prefix, Key: "tenant", Limit: hybridlimit.PerMinute(200_000),
		Requests: 200, Estimate: 500, MinActual: 100, MaxActual: 2000, Pace: 30 * time.Millisecond,
	}, func() {
		if err := master.Signal(syscall.SIGKILL); err != nil {
			t.Error(err)
		}
	})
}

// TestChargeWorker is one process of chargeFleet.
func TestChargeWorker(t *testing.T) {
	var cfg chargeConfig
	workerConfig(t, chargeEnv, &cfg)
	var rdb redis.UniversalClient
	if len(cfg.Addrs) > 0 {
		redis.SetLogger(quietLogger{}) // each dial a dead master refuses
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Addrs, ContextTimeoutEnabled: true})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: cfg.Addr})
	}
	defer rdb.Close()
	l, err := hlsync.New(rdb, hlsync.WithPrefix(cfg.Prefix), hlsync.WithInstanceID(cfg.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(cfg.Seed, 2))
	var log chargeLog
	var repaid, chargedAt time.Time // when the last debt this worker's charge found is repaid, and the charge returned
	fail := func(op string, err error) {
		if log.FirstError == "" {
			log.FirstError = op + ": " + err.Error()
		}
	}
	for range cfg.Requests {
		time.Sleep(cfg.Pace)
		r, err := l.AllowN(ctx, cfg.Key, cfg.Limit, cfg.Estimate)
		if err != nil {
			fail("AllowN", err)
			continue
		}
		if !r.Allowed {
			continue
		}
		log.Admitted++
		if now := time.Now(); now.Before(repaid) {
			log.InDebt++
			log.InDebtAt = append(log.InDebtAt, debtAdmission{chargedAt.UnixNano(), now.UnixNano(), repaid.UnixNano(), r.Source.String()})
		}
		actual := cfg.MinActual + rng.Int64N(cfg.MaxActual-cfg.MinActual+1)
		log.Used += actual
		log.Net += cfg.Estimate
		switch {
		case actual > cfg.Estimate:
			c, err := l.Charge(ctx, cfg.Key, cfg.Limit, actual-cfg.Estimate)
			if err != nil {
				fail("Charge", err)
				log.Used -= actual - cfg.Estimate // not recorded: the bucket holds it
			}
			// In debt by Redis's word: the wait for one token is longer
			// than one token's refill. Repaid a token's refill before
			// that wait ends.
			perToken := cfg.Limit.Period / time.Duration(cfg.Limit.Rate)
			if c.Source == hybridlimit.SourceGlobal && c.RetryAfter > perToken {
				chargedAt = time.Now()
				repaid = chargedAt.Add(c.RetryAfter - perToken)
			}
		case actual < cfg.Estimate:
			if err := l.Refund(ctx, cfg.Key, cfg.Limit, cfg.Estimate-actual); err != nil {
				fail("Refund", err)
				log.Used += cfg.Estimate - actual // not given back
			} else {
				log.Net -= cfg.Estimate - actual
				log.Refunds = append(log.Refunds, refund{time.Now().UnixNano(), cfg.Estimate - actual})
			}
		}
	}
	if err := l.Close(ctx); err != nil {
		fail("Close", err)
	}
	log.Stats = l.Stats()
	out, err := json.Marshal(log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Out, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestChargeOutlivesItsContext charges on a context already ended: the
// charge is recorded, with no error (a caller that retried would charge
// twice), and the next round has Redis take it.
func TestChargeOutlivesItsContext(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	l, err := hlsync.New(rdb, hlsync.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	limit := frozen(10)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := l.Charge(ended, "k", limit, 25)
	if err != nil || !r.Allowed || r.Source != hybridlimit.SourceLocal {
		t.Fatalf("Charge on an ended context: %+v, %v; want allowed, local, no error", r, err)
	}
	ctx := context.Background()
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Owed != 0 || s.Charged != 25 {
		t.Errorf("after a round: Owed %d, Charged %d; want 0, 25", s.Owed, s.Charged)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := taken(t, rdb, prefix, "k", limit, 64); got != 25 {
		t.Errorf("the bucket is %d short of full, want 25", got)
	}
}

// TestDebtRemembered charges a key three bursts past empty and lets it
// sit, unasked, for longer than an idle key is kept: the instance keeps
// the key while its bucket is in debt, and Peek's ResetAfter counts down
// with the clock (what the Envoy service's checks read), so a check reads
// the key as in debt until refill has repaid it, not as full once it was
// forgotten. Once repaid, the key goes as any idle key does.
func TestDebtRemembered(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	ctx := context.Background()
	clk := clock.New(time.Now())
	l, err := hlsync.New(rdb, hlsync.WithClock(clk), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	limit := hybridlimit.PerMinute(60) // a token a second; full in a minute
	if r, err := l.Allow(ctx, "k", limit); err != nil || !r.Allowed {
		t.Fatalf("first request: %+v, %v", r, err)
	}
	if _, err := l.Charge(ctx, "k", limit, 179); err != nil { // 180 spent: 120 past empty
		t.Fatal(err)
	}
	step := func(d time.Duration) {
		for end := clk.Now().Add(d); clk.Now().Before(end); {
			clk.Advance(5 * time.Second)
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	step(100 * time.Second) // past the idle hold; 20 s of debt left, full in 80 s
	p, err := l.Peek(ctx, "k", limit)
	if err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Keys != 1 || s.Debt != 20 || p.ResetAfter < 78*time.Second || p.ResetAfter > 81*time.Second {
		t.Errorf("100 s into a debt of 120 tokens: %d keys tracked, debt %d, ResetAfter %v; want the key kept, 20 in debt, about 80 s", s.Keys, s.Debt, p.ResetAfter)
	}
	step(200 * time.Second) // repaid, and idle past the hold
	if s := l.Stats(); s.Keys != 0 || s.Debt != 0 {
		t.Errorf("once repaid: %d keys tracked, debt %d; want the key evicted", s.Keys, s.Debt)
	}
}
