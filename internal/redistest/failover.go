package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Helpers for failover tests on a private cluster (NewCluster,
// NewClusterWith). None of them is for the shared cluster: they change
// which node is master.

// ask runs f on a short-lived client to s, bounded by one second.
func ask[T any](s *Server, f func(ctx context.Context, c *redis.Client) (T, error)) (T, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return f(ctx, c)
}

func (c *ClusterServers) byAddr(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// slotsView returns the master serving slot and its healthy replicas as
// node s sees them, from CLUSTER NODES (CLUSTER SLOTS hides replicas that
// have not yet replicated a byte).
func (c *ClusterServers) slotsView(s *Server, slot int) (master *Server, replicas []*Server, err error) {
	text, err := ask(s, func(ctx context.Context, cl *redis.Client) (string, error) {
		return cl.ClusterNodes(ctx).Result()
	})
	if err != nil {
		return nil, nil, err
	}
	type node struct {
		addr, flags, master string
		slots               []string
	}
	nodes := map[string]node{}
	masterID := ""
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := node{addr: addr, flags: f[2], master: f[3], slots: f[8:]}
		nodes[f[0]] = n
		if strings.Contains(n.flags, "master") && !strings.Contains(n.flags, "fail") && servesSlot(n.slots, slot) {
			masterID = f[0]
		}
	}
	if masterID == "" {
		return nil, nil, fmt.Errorf("slot %d not served (as %s sees it)", slot, s.Addr)
	}
	if master = c.byAddr(nodes[masterID].addr); master == nil {
		return nil, nil, fmt.Errorf("slot %d served by unknown node %s", slot, nodes[masterID].addr)
	}
	for _, n := range nodes {
		if n.master == masterID && strings.Contains(n.flags, "slave") && !strings.Contains(n.flags, "fail") {
			if r := c.byAddr(n.addr); r != nil {
				replicas = append(replicas, r)
			}
		}
	}
	return master, replicas, nil
}

// servesSlot reports whether the slot fields of a CLUSTER NODES line
// ("0-5460", "5461", "[93->-id]" while migrating) cover slot.
func servesSlot(fields []string, slot int) bool {
	for _, f := range fields {
		if strings.HasPrefix(f, "[") {
			continue
		}
		lo, hi, isRange := strings.Cut(f, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && slot >= a && slot <= b {
			return true
		}
	}
	return false
}

// SlotOwner returns the master serving slot and its replicas, as the first
// node that answers sees them.
func (c *ClusterServers) SlotOwner(tb testing.TB, slot int) (master *Server, replicas []*Server) {
	tb.Helper()
	var lastErr error
	for _, n := range c.Nodes {
		m, r, err := c.slotsView(n, slot)
		if err == nil {
			return m, r
		}
		lastErr = err
	}
	tb.Fatalf("redistest: no node says who serves slot %d: %v", slot, lastErr)
	return nil, nil
}

// Failover runs CLUSTER FAILOVER on replica, the manual failover that waits
// for the replica to catch up with its master before they swap roles (no
// acknowledged write is lost), and waits until every live node sees the
// replica serve slot. It returns the time from the command until then.
func (c *ClusterServers) Failover(tb testing.TB, replica *Server, slot int) time.Duration {
	tb.Helper()
	start := time.Now()
	if _, err := ask(replica, func(ctx context.Context, cl *redis.Client) (string, error) {
		return cl.ClusterFailover(ctx).Result()
	}); err != nil {
		tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica.Addr, err)
	}
	c.WaitServes(tb, replica, slot, 15*time.Second)
	return time.Since(start)
}

// WaitServes waits until s is master and every node that answers says s
// serves slot and the cluster is ok, or fails the test after timeout.
func (c *ClusterServers) WaitServes(tb testing.TB, s *Server, slot int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := c.serves(s, slot)
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: %s does not serve slot %d after %v: %s\n%s", s.Addr, slot, timeout, why, s.LogTail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serves returns why s is not (yet) the agreed master of slot, or "".
func (c *ClusterServers) serves(s *Server, slot int) string {
	role, err := ask(s, func(ctx context.Context, cl *redis.Client) (string, error) {
		return cl.Info(ctx, "replication").Result()
	})
	if err != nil {
		return err.Error()
	}
	if !strings.Contains(role, "role:master") {
		return s.Addr + " is not master"
	}
	for _, n := range c.Nodes {
		info, err := ask(n, func(ctx context.Context, cl *redis.Client) (string, error) {
			return cl.ClusterInfo(ctx).Result()
		})
		if err != nil {
			continue // a dead node
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return n.Addr + " says the cluster is not ok"
		}
		m, _, err := c.slotsView(n, slot)
		if err != nil {
			return err.Error()
		}
		if m != s {
			return fmt.Sprintf("%s says %s serves slot %d", n.Addr, m.Addr, slot)
		}
	}
	return ""
}

// NoLeaksAfterKill is NoLeaks for tests whose server dies or is never
// there: go-redis probes a dead address from a goroutine of its own that
// sleeps a second between probes and exits at the first probe after its
// client closed, however loaded the machine. That goroutine is go-redis's,
// bounded, and not ours to wait for, so the check ignores it; any other
// goroutine left behind still fails the test.
func NoLeaksAfterKill(tb testing.TB) {
	tb.Helper()
	opts := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")}
	tb.Cleanup(func() { goleak.VerifyNone(tb, opts...) })
}

// FlushScripts empties the script cache of each server (SCRIPT FLUSH), as a
// restart or a failover to a replica would. Only for servers a test owns.
func FlushScripts(tb testing.TB, servers ...*Server) {
	tb.Helper()
	for _, s := range servers {
		if _, err := ask(s, func(ctx context.Context, cl *redis.Client) (string, error) {
			return cl.ScriptFlush(ctx).Result()
		}); err != nil {
			tb.Fatalf("redistest: SCRIPT FLUSH on %s: %v", s.Addr, err)
		}
	}
}

// ErrorReplies returns how many error replies of a kind (such as
// "NOSCRIPT" or "OOM") the server has sent since it started, from INFO
// errorstats: proof that a test reached the path it means to test.
func (s *Server) ErrorReplies(tb testing.TB, kind string) int64 {
	tb.Helper()
	info, err := ask(s, func(ctx context.Context, cl *redis.Client) (string, error) {
		return cl.Info(ctx, "errorstats").Result()
	})
	if err != nil {
		tb.Fatalf("redistest: INFO errorstats on %s: %v", s.Addr, err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+kind+":count=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			tb.Fatalf("redistest: INFO errorstats on %s: %q", s.Addr, line)
		}
		return n
	}
	return 0
}

// EvictAll makes the server evict every key under prefix, as memory
// pressure would under an allkeys-* policy (which the test must have set):
// it lowers maxmemory to a little above what the server uses, writes 10kB
// filler values under "filler:" until no key under prefix is left, and
// lifts the limit again. It returns the filler values written.
func (s *Server) EvictAll(tb testing.TB, prefix string) int {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	ctx := context.Background()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		tb.Fatalf("redistest: INFO memory: %v", err)
	}
	var used int64
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if used == 0 {
		tb.Fatalf("redistest: no used_memory in INFO memory")
	}
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+1<<20, 10)).Err(); err != nil {
		tb.Fatalf("redistest: CONFIG SET maxmemory: %v", err)
	}
	filler := strings.Repeat("x", 10_000)
	i := 0
	for ; ; i++ {
		if i%50 == 0 {
			keys, err := c.Keys(ctx, prefix+"*").Result()
			if err != nil {
				tb.Fatalf("redistest: KEYS: %v", err)
			}
			if len(keys) == 0 {
				break
			}
		}
		if i == 5000 {
			tb.Fatalf("redistest: keys under %q still there after 50MB of filler", prefix)
		}
		if err := c.Set(ctx, fmt.Sprintf("filler:%d", i), filler, 0).Err(); err != nil {
			tb.Fatalf("redistest: filler: %v", err)
		}
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		tb.Fatalf("redistest: CONFIG SET maxmemory: %v", err)
	}
	return i
}

// MoveSlot moves slot, with its keys, from the master serving it to the
// master to, as redis-cli --cluster reshard does (IMPORTING on to,
// MIGRATING on the source, MIGRATE of the keys, then every master told
// the new owner), and waits until every node agrees. Clients keep their
// slot maps until a redirection tells them: the tests of stale maps use
// it.
func (c *ClusterServers) MoveSlot(tb testing.TB, slot int, to *Server) {
	tb.Helper()
	from, _ := c.SlotOwner(tb, slot)
	if from == to {
		return
	}
	id := func(s *Server) string {
		v, err := ask(s, func(ctx context.Context, cl *redis.Client) (string, error) {
			return cl.Do(ctx, "CLUSTER", "MYID").Text()
		})
		if err != nil {
			tb.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr, err)
		}
		return v
	}
	do := func(s *Server, args ...any) {
		tb.Helper()
		if _, err := ask(s, func(ctx context.Context, cl *redis.Client) (any, error) {
			return cl.Do(ctx, args...).Result()
		}); err != nil {
			tb.Fatalf("redistest: %v on %s: %v", args, s.Addr, err)
		}
	}
	fromID, toID := id(from), id(to)
	do(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID)
	do(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID)
	host, port, _ := strings.Cut(to.Addr, ":")
	for {
		keys, err := ask(from, func(ctx context.Context, cl *redis.Client) ([]string, error) {
			return cl.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		})
		if err != nil {
			tb.Fatalf("redistest: CLUSTER GETKEYSINSLOT on %s: %v", from.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		do(from, args...)
	}
	for _, s := range append([]*Server{to, from}, c.Masters(tb)...) {
		do(s, "CLUSTER", "SETSLOT", slot, "NODE", toID)
	}
	c.WaitServes(tb, to, slot, 15*time.Second)
}

// Masters returns the nodes that are masters now.
func (c *ClusterServers) Masters(tb testing.TB) []*Server {
	tb.Helper()
	var out []*Server
	for _, n := range c.Nodes {
		role, err := ask(n, func(ctx context.Context, cl *redis.Client) (string, error) {
			return cl.Info(ctx, "replication").Result()
		})
		if err == nil && strings.Contains(role, "role:master") {
			out = append(out, n)
		}
	}
	return out
}
