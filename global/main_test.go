package global

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// t0 is the origin of the virtual time grid: a whole hour, so windows of a
// second, a minute or an hour start on it.
var t0 = time.Unix(1_800_000_000, 0)

const us = time.Microsecond

// topologies are the Redis deployments every Redis claim is proven on.
var topologies = redistest.Topologies

// checkTTLs fails the test if a key under prefix lacks a TTL.
var checkTTLs = redistest.CheckTTLs

// timeUS returns the time of n microseconds since the Unix epoch.
func timeUS(n int64) time.Time { return time.UnixMicro(n) }
