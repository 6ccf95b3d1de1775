package sync_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// replicated starts a master and one replica and waits for the link.
func replicated(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	master = redistest.Start(t)
	host, port, _ := strings.Cut(master.Addr, ":")
	replica = redistest.Start(t, "replicaof "+host+" "+port)
	c := replica.Client(t)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, _ := c.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return master, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never linked: %s", info)
		}
	}
}

// TestDurableSync checks WithDurableSync on a master with one replica:
// with the replica up the limiter admits exactly its budget; with the
// replica stopped no grant counts, so a new key is decided by the failure
// policy (here fail-closed) and nothing is admitted from Redis; with the
// replica back, sync resumes by itself.
func TestDurableSync(t *testing.T) {
	defaultBuildOnly(t)
	redistest.NoLeaks(t)
	master, replica := replicated(t)
	prefix := redistest.Prefix(t)
	ls := newLimiters(t, 2, func() hybridlimit.Redis { return master.Client(t) }, hlsync.WithPrefix(prefix),
		hlsync.WithSyncInterval(50*time.Millisecond, 0.1), hlsync.WithDurableSync(1, 100*time.Millisecond),
		hlsync.WithFailurePolicy(hybridlimit.FailClosed), hlsync.WithMaxWait(200*time.Millisecond))
	const burst = 500
	limit := frozen(burst)
	admitted, err := hammer(ls, 4, "k", limit, burst, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := sum(admitted); got != burst {
		t.Errorf("replica up: admitted %d, want exactly %d", got, burst)
	}

	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var fromRedis int
	for i := range 20 {
		r, err := ls[0].Allow(context.Background(), "fresh", hybridlimit.PerSecond(1000))
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			fromRedis++
		}
		if i == 0 && r.Allowed {
			t.Errorf("first decision on a fresh key admitted with the replica stopped: %+v", r)
		}
	}
	if fromRedis != 0 {
		t.Errorf("replica stopped: %d of 20 admitted, want 0 under fail-closed", fromRedis)
	}
	s := ls[0].Stats()
	if s.Errors[hybridlimit.ErrorTimeout] == 0 {
		t.Errorf("replica stopped: no failed call counted: %v", s.Errors)
	}
	if err := replica.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, err := ls[0].Allow(context.Background(), "fresh", hybridlimit.PerSecond(1000))
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed && r.Source != hybridlimit.SourceFallback {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no admission 10s after the replica came back: %+v", ls[0].Stats())
		}
	}
}

// TestDurableSyncCluster runs durable sync on the 3+3 cluster, where each
// node's calls go through that node's client with WAIT: the budget is
// admitted exactly (failing closed, so that a fetch slow on a loaded
// machine denies rather than falls back), and no call fails for want of
// replicas. A round's timeout is the interval plus WAIT's: WAIT waits up to
// 2 s here, so that a round slowed by a loaded machine (over half a second
// under -race beside the other packages) is not taken for a missing
// replica, which both report as a timeout.
func TestDurableSyncCluster(t *testing.T) {
	defaultBuildOnly(t)
	redistest.NoLeaks(t)
	newClient := clients(t, true)
	prefix := redistest.Prefix(t)
	ls := newLimiters(t, 3, newClient, hlsync.WithPrefix(prefix), hlsync.WithSyncInterval(50*time.Millisecond, 0.1),
		hlsync.WithDurableSync(1, 2*time.Second), split(3), hlsync.WithFailurePolicy(hybridlimit.FailClosed))
	const burst = 900
	limit := frozen(burst)
	admitted, err := hammer(ls, 4, "hot", limit, burst, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := sum(admitted); got != burst {
		t.Errorf("admitted %d, want exactly %d", got, burst)
	}
	for _, l := range ls {
		if s := l.Stats(); s.RoundErrors != 0 {
			t.Errorf("%s: %d failed rounds, errors %v", l.InstanceID(), s.RoundErrors, s.Errors)
		}
	}
	if _, err := hlsync.New(newClient(), hlsync.WithDurableSync(0, time.Second)); err == nil {
		t.Error("durable sync with 0 replicas accepted")
	}
	if _, err := hlsync.New(newClient(), hlsync.WithDurableSync(1, 0)); err == nil {
		t.Error("durable sync with no timeout accepted")
	}
	if _, err := hlsync.New(newClient(), hlsync.WithDurableSync(1, time.Second), hlsync.WithRoundTimeout(100*time.Millisecond)); err == nil {
		t.Error("round timeout shorter than the WAIT timeout accepted")
	}
}
