package redistest

import (
	"context"
	"strconv"
	"strings"
	stdsync "sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandCalls returns, for every master reachable through cc, by address,
// how many times the named commands (lower case, such as "evalsha") have
// run there, from INFO commandstats. Tests take the difference of two
// readings, so work done by others before the first one does not count.
func CommandCalls(tb testing.TB, cc *redis.ClusterClient, commands ...string) map[string]int64 {
	tb.Helper()
	var mu stdsync.Mutex
	calls := make(map[string]int64)
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		var n int64
		for _, line := range strings.Split(info, "\n") {
			for _, cmd := range commands {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
					v, _ := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
					n += v
				}
			}
		}
		mu.Lock()
		calls[c.Options().Addr] = n
		mu.Unlock()
		return nil
	})
	if err != nil {
		tb.Fatalf("redistest: commandstats: %v", err)
	}
	return calls
}

// SlotOwners returns the address of the master that serves each slot, from
// CLUSTER SLOTS.
func SlotOwners(tb testing.TB, cc *redis.ClusterClient) map[int]string {
	tb.Helper()
	ranges, err := cc.ClusterSlots(context.Background()).Result()
	if err != nil {
		tb.Fatalf("redistest: cluster slots: %v", err)
	}
	owners := make(map[int]string)
	for _, r := range ranges {
		for s := r.Start; s <= r.End; s++ {
			owners[s] = r.Nodes[0].Addr
		}
	}
	return owners
}

// Topology is a Redis deployment a claim is proven on.
type Topology struct {
	Name string
	Dial func(testing.TB) redis.UniversalClient
}

// Topologies are the deployments every Redis claim is proven on: the
// shared standalone server and the shared 3+3 cluster.
var Topologies = []Topology{
	{"standalone", func(tb testing.TB) redis.UniversalClient { return Standalone(tb) }},
	{"cluster", func(tb testing.TB) redis.UniversalClient { return Cluster(tb) }},
}

// CheckTTLs fails the test if any key under prefix lacks a TTL, or if there
// are no keys at all (the check would prove nothing).
func CheckTTLs(tb testing.TB, c redis.UniversalClient, prefix string) {
	tb.Helper()
	noTTL, seen := KeysWithoutTTL(tb, c, prefix)
	if seen == 0 {
		tb.Errorf("no keys under %q: the TTL check saw nothing", prefix)
	}
	if len(noTTL) > 0 {
		tb.Errorf("%d of %d keys have no TTL: %q", len(noTTL), seen, noTTL)
	}
}

// FreshClient returns a new client that has learned the topology as it is
// now (it has reached every master), for checks after a failover; closed
// when the test ends.
func (c *ClusterServers) FreshClient(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := c.Client(tb)
	if err := cc.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
		return n.Ping(ctx).Err()
	}); err != nil {
		tb.Fatalf("redistest: fresh client: %v", err)
	}
	return cc
}

// ErrorRepliesOf sums ErrorReplies of kind over servers.
func ErrorRepliesOf(tb testing.TB, kind string, servers []*Server) (n int64) {
	tb.Helper()
	for _, s := range servers {
		n += s.ErrorReplies(tb, kind)
	}
	return n
}
