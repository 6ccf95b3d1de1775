package global

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// t0 is the origin of the virtual time grid: a whole hour, so windows of a
// second, a minute or an hour start on it.
var t0 = time.Unix(1_800_000_000, 0)

const us = time.Microsecond

// topologies are the Redis deployments every Redis claim is proven on.
var topologies = []struct {
	name string
	dial func(testing.TB) redis.UniversalClient
}{
	{"standalone", func(tb testing.TB) redis.UniversalClient { return redistest.Standalone(tb) }},
	{"cluster", func(tb testing.TB) redis.UniversalClient { return redistest.Cluster(tb) }},
}

// checkTTLs fails the test if any key under prefix lacks a TTL, or if there
// are no keys at all (the check would prove nothing).
func checkTTLs(tb testing.TB, c redis.UniversalClient, prefix string) {
	tb.Helper()
	noTTL, seen := redistest.KeysWithoutTTL(tb, c, prefix)
	if seen == 0 {
		tb.Errorf("no keys under %q: the TTL check saw nothing", prefix)
	}
	if len(noTTL) > 0 {
		tb.Errorf("%d of %d keys have no TTL: %q", len(noTTL), seen, noTTL)
	}
}

// timeUS returns the time of n microseconds since the Unix epoch.
func timeUS(n int64) time.Time { return time.UnixMicro(n) }
