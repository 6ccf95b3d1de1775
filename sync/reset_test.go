package sync_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestReset drains a key from two instances, whole and split in three
// parts, and resets it from one: that one admits at once; the other, which
// Redis told the key is empty, forgets what it knew at its next message and
// admits again within a few intervals; and after the reset the two admit
// no more than the key's budget, once.
func TestReset(t *testing.T) {
	redistest.NoLeaks(t)
	for _, tc := range []struct {
		name   string
		shards int
	}{{"whole", 1}, {"split", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			newClient := clients(t, true)
			prefix := redistest.Prefix(t)
			const interval = 50 * time.Millisecond
			opts := []hlsync.Option{hlsync.WithPrefix(prefix), hlsync.WithSyncInterval(interval, 0.1),
				hlsync.WithLowLimitThreshold(0), hlsync.WithFailurePolicy(hybridlimit.FailClosed)}
			if tc.shards > 1 {
				opts = append(opts, hlsync.WithSplitKeys(func(string, hybridlimit.Limit) int { return tc.shards }))
			}
			ls := newLimiters(t, 2, newClient, opts...)
			const budget = 300
			limit := frozen(budget)
			if admitted, err := hammer(ls, 2, "k", limit, budget, 3*interval); err != nil || sum(admitted) != budget {
				t.Fatalf("drained %v (%v), want %d", admitted, err, budget)
			}
			ctx := context.Background()
			if err := ls[0].Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			var first int64 // admitted by the first two decisions after the reset
			if r, err := ls[0].Allow(ctx, "k", limit); err != nil || !r.Allowed {
				t.Errorf("the resetting instance, at once: %+v, %v; want admitted", r, err)
			} else {
				first++
			}
			deadline := time.Now().Add(20 * interval)
			for {
				r, err := ls[1].Allow(ctx, "k", limit)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					first++
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the other instance still denied 20 intervals after the reset: %+v", r)
				}
				time.Sleep(interval / 5)
			}
			after, err := hammer(ls, 2, "k", limit, budget-first, 3*interval)
			if err != nil {
				t.Fatal(err)
			}
			// The first admitted above, the rest here: the new budget once.
			if got := sum(after) + first; got != budget {
				bucket, _ := ls[0].Keys("k")
				state, _ := newClient().(redis.UniversalClient).HGetAll(ctx, bucket).Result()
				s0, s1 := ls[0].Stats(), ls[1].Stats()
				t.Errorf("admitted %d after the reset, want the budget %d once; Redis holds %v; outstanding %d and %d, dropped %d and %d, evicted %d and %d",
					got, budget, state, s0.Outstanding, s1.Outstanding, s0.Dropped, s1.Dropped, s0.Evictions, s1.Evictions)
			}
			redistest.CheckTTLs(t, newClient().(redis.UniversalClient), prefix)
		})
	}
}

func TestResetRejectsBadInput(t *testing.T) {
	redistest.NoLeaks(t)
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Reset(ctx, ""); !errors.Is(err, hybridlimit.ErrInvalidKey) {
		t.Errorf("Reset(\"\") = %v, want ErrInvalidKey", err)
	}
	if err := l.Reset(ctx, "never-seen"); err != nil {
		t.Errorf("Reset of a key never asked = %v, want nil", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, "k"); !errors.Is(err, hlsync.ErrClosed) {
		t.Errorf("Reset after Close = %v, want ErrClosed", err)
	}
}

// resetEnv carries a reset worker's configuration, JSON, to the re-run
// test binary (TestResetWorker).
const resetEnv = "HYBRIDLIMIT_RESET_WORKER"

type resetConfig struct {
	Addrs    []string
	Cluster  bool
	Prefix   string
	Key      string
	Limit    hybridlimit.Limit
	Shards   int
	Ready    string // written once the worker is denied
	Admitted string // written once it admits after the reset
	Out      string // its resetReport, written when it is done
	Deadline time.Time
}

// resetReport is what a reset worker saw, in wall-clock nanoseconds.
type resetReport struct {
	Before, After int64 // cost admitted before it was denied, and after the reset
	// PolicyBefore is what its failure policy admitted of Before (a fetch
	// past the max wait).
	PolicyBefore uint64
	ReadyAt      int64 // when it found the key empty
	FirstMessage int64 // its first key message after ReadyAt, 0 if none
	Admitted     int64 // its first admission after ReadyAt, 0 if none
	Interval     time.Duration
}

// TestResetReachesEveryProcess is the reset of a key that another process
// holds a denial of: that process must admit again within a sync interval
// of the reset, and must not have asked Redis while it was denied. Two OS
// processes, default options, on one server and on the cluster, whole and
// split. Instance a (this process) and b (a worker) drain a limit of a few
// tokens an hour; b keeps asking, denied; a resets the key; b's first
// admission is timed from the end of Reset. Then the two admit the budget
// once more, not beyond it.
func TestResetReachesEveryProcess(t *testing.T) {
	defaultBuildOnly(t)
	redistest.NoLeaks(t)
	for _, cluster := range []bool{false, true} {
		for _, shards := range []int{1, 3} {
			t.Run(fmt.Sprintf("cluster=%v/shards=%d", cluster, shards), func(t *testing.T) {
				// Each case has its own instances and key, and mostly
				// waits for sync intervals to pass.
				t.Parallel()
				var addrs []string
				var rdb hybridlimit.Redis
				if cluster {
					cl := redistest.ClusterOf(t)
					addrs, rdb = cl.Addrs(), cl.Client(t)
				} else {
					s := redistest.StandaloneServer(t)
					addrs, rdb = []string{s.Addr}, s.Client(t)
				}
				burst := int64(4)
				if shards > 1 {
					burst = 2 * int64(shards) // two tokens a part
				}
				dir := t.TempDir()
				cfg := resetConfig{
					Addrs: addrs, Cluster: cluster, Prefix: redistest.Prefix(t), Key: "hot",
					Limit: hybridlimit.PerHour(burst), Shards: shards,
					Ready: filepath.Join(dir, "ready"), Admitted: filepath.Join(dir, "admitted"), Out: filepath.Join(dir, "out.json"),
					Deadline: time.Now().Add(90 * time.Second),
				}
				a, err := hlsync.New(rdb, resetOptions(cfg, "a")...)
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = a.Close(context.Background()) })
				cmd := startWorker(t, "TestResetWorker", resetEnv, cfg)
				for {
					if _, err := os.Stat(cfg.Ready); err == nil {
						break
					}
					if time.Now().After(cfg.Deadline) {
						t.Fatal("the worker never found the key empty")
					}
					time.Sleep(10 * time.Millisecond)
				}
				ctx := context.Background()
				before, err := drainKey(ctx, a, cfg)
				if err != nil {
					t.Fatal(err)
				}
				policyBefore := a.Stats().FallbackAllowed
				// b keeps asking, denied, for a while before the reset,
				// which comes at any point of b's sync interval.
				time.Sleep(4*a.Interval() + rand.N(a.Interval()))
				if err := a.Reset(ctx, cfg.Key); err != nil {
					t.Fatal(err)
				}
				resetAt := time.Now()
				// a waits for b's admission before it asks again: asking
				// at once, it would take the whole new budget itself.
				for {
					if _, err := os.Stat(cfg.Admitted); err == nil {
						break
					}
					if time.Since(resetAt) > 30*time.Second {
						break // b reports why
					}
					time.Sleep(time.Millisecond)
				}
				after, err := drainKey(ctx, a, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Wait(); err != nil {
					t.Fatalf("worker: %v", err)
				}
				var b resetReport
				if raw, err := os.ReadFile(cfg.Out); err != nil {
					t.Fatal(err)
				} else if err := json.Unmarshal(raw, &b); err != nil {
					t.Fatal(err)
				}
				// A drain admits the burst exactly, beyond what the failure
				// policy admitted: on a machine too busy to answer a fetch
				// within the max wait, FallbackLocal admits from its share
				// (design 6.6), which Redis takes after, as debt.
				policy := int64(policyBefore + b.PolicyBefore)
				if got := before + b.Before; got < cfg.Limit.Burst || got > cfg.Limit.Burst+policy {
					t.Errorf("admitted %d (a %d, b %d; by the failure policy a %d, b %d) draining the key, want its burst %d",
						got, before, b.Before, policyBefore, b.PolicyBefore, cfg.Limit.Burst)
				}
				if b.FirstMessage != 0 && b.FirstMessage < resetAt.Add(-time.Second).UnixNano() && b.FirstMessage < b.Admitted {
					// A second's grace: the message that found the key
					// reset may have left before Reset returned.
					t.Errorf("b sent a key message %v after it found the key empty, before the reset: a denial it remembers should cost no Redis call",
						time.Duration(b.FirstMessage-b.ReadyAt))
				}
				if b.Admitted == 0 {
					t.Fatalf("b never admitted in the 20 s after it found the key empty: it did not hear of the reset")
				}
				took := time.Duration(b.Admitted - resetAt.UnixNano())
				t.Logf("b admitted %v after Reset returned (sync interval %v)", took, b.Interval)
				// Design 6.1: heard at b's next presence call, at most an
				// interval after the reset, then a round trip to forget and
				// one to fetch; an interval more of slack for a loaded
				// machine under -race.
				if took > 2*b.Interval {
					t.Errorf("b admitted %v after the reset, want within the sync interval %v (plus round trips)", took, b.Interval)
				}
				if got := after + b.After; got != cfg.Limit.Burst {
					t.Errorf("admitted %d (a %d, b %d) after the reset, want the burst %d once", got, after, b.After, cfg.Limit.Burst)
				}
				redistest.CheckTTLs(t, rdb.(redis.UniversalClient), cfg.Prefix)
			})
		}
	}
}

// TestResetWorker is instance b of TestResetReachesEveryProcess; run
// directly it skips. It drains the key, says so, keeps asking until the
// reset lets it admit, drains the key again and reports.
func TestResetWorker(t *testing.T) {
	var cfg resetConfig
	workerConfig(t, resetEnv, &cfg)
	var rdb hybridlimit.Redis
	if cfg.Cluster {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Addrs})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: cfg.Addrs[0]})
	}
	b, err := hlsync.New(rdb, resetOptions(cfg, "b")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer b.Close(ctx)
	rep := resetReport{Interval: b.Interval()}
	if rep.Before, err = drainKey(ctx, b, cfg); err != nil {
		t.Fatal(err)
	}
	rep.PolicyBefore = b.Stats().FallbackAllowed
	rep.ReadyAt = time.Now().UnixNano()
	messages := b.Stats().Messages
	if err := os.WriteFile(cfg.Ready, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Long enough for a reset to reach it many times over; a denial
	// remembered until the next token lasts a quarter of an hour.
	giveUp := time.Now().Add(20 * time.Second)
	for rep.Admitted == 0 && time.Now().Before(giveUp) {
		r, err := b.Allow(ctx, cfg.Key, cfg.Limit)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UnixNano()
		if rep.FirstMessage == 0 && b.Stats().Messages != messages {
			rep.FirstMessage = now
		}
		if r.Allowed {
			rep.Admitted, rep.After = now, 1
		}
		time.Sleep(time.Millisecond)
	}
	if rep.Admitted != 0 {
		if err := os.WriteFile(cfg.Admitted, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		n, err := drainKey(ctx, b, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rep.After += n
	}
	out, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Out, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// resetOptions are the reset test's options: the defaults, but for the
// prefix, the instance and a split key's shards.
func resetOptions(cfg resetConfig, id string) []hlsync.Option {
	opts := []hlsync.Option{hlsync.WithPrefix(cfg.Prefix), hlsync.WithInstanceID(id)}
	if cfg.Shards > 1 {
		opts = append(opts, hlsync.WithSplitKeys(func(string, hybridlimit.Limit) int { return cfg.Shards }))
	}
	return opts
}

// drainKey asks for the key until it has been denied by its limit for eight
// sync intervals on end (a split key turns to another part at most once
// every two intervals, and later on a machine loaded by other tests), and
// returns the cost admitted. A decision of the failure policy (a fetch that
// outlasted the default max wait on a loaded machine) is not a denial by
// the limit: the quiet period starts again after it.
func drainKey(ctx context.Context, l *hlsync.Limiter, cfg resetConfig) (int64, error) {
	var admitted int64
	quiet := 8 * l.Interval()
	since := time.Now()
	for time.Since(since) < quiet {
		if time.Now().After(cfg.Deadline) {
			return admitted, errors.New("drain: past the deadline")
		}
		r, err := l.Allow(ctx, cfg.Key, cfg.Limit)
		switch {
		case err != nil:
			return admitted, err
		case r.Allowed:
			admitted++
			since = time.Now()
		case r.Source == hybridlimit.SourceFallback:
			since = time.Now()
		}
		time.Sleep(time.Millisecond)
	}
	return admitted, nil
}

// TestResetKeyTakenElsewhere resets a split key that instance b drained,
// lets a take the whole new budget, and then asks b: every part b knew is
// reset under it and each new one is asked once, so b's first decision
// takes more fetches than a decision is allowed while Redis answers every
// one. It must be denied by the limit, never handed to the failure policy
// as if Redis had not answered.
func TestResetKeyTakenElsewhere(t *testing.T) {
	defaultBuildOnly(t)
	redistest.NoLeaks(t)
	ls := newLimiters(t, 2, clients(t, false), hlsync.WithPrefix(redistest.Prefix(t)), split(3))
	a, b := ls[0], ls[1]
	ctx := context.Background()
	cfg := resetConfig{Key: "hot", Limit: hybridlimit.PerHour(6), Deadline: time.Now().Add(time.Minute)}
	// a tracks the key (Reset resets the parts of the layouts the
	// resetting instance knows), b takes the rest.
	if r, err := a.Allow(ctx, cfg.Key, cfg.Limit); err != nil || !r.Allowed {
		t.Fatalf("a's first decision: %+v, %v", r, err)
	}
	if n, err := drainKey(ctx, b, cfg); err != nil || n != 5 {
		t.Fatalf("b drained %d (%v), want the 5 a left", n, err)
	}
	if err := a.Reset(ctx, cfg.Key); err != nil {
		t.Fatal(err)
	}
	if n, err := drainKey(ctx, a, cfg); err != nil || n != 6 {
		t.Fatalf("a drained %d after the reset (%v), want 6", n, err)
	}
	for i := range 10 {
		r, err := b.Allow(ctx, cfg.Key, cfg.Limit)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed || r.Source == hybridlimit.SourceFallback {
			t.Errorf("b's decision %d after a took the reset budget: %+v, want denied by the limit", i, r)
		}
	}
}
