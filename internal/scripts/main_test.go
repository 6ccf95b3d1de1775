package scripts

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// interpreter is a server a test runs one script on, by name.
type interpreter struct {
	name string
	c    redis.Cmdable
}

// interpreters returns the test binary's Redis and a miniredis of the
// test's own, whose Lua is Go's (the tests' and the simulator's), to run
// one script on both. miniredis's client waits a minute for a reply: Go's
// Lua runs thousands of cases in seconds under -race on a loaded machine,
// past go-redis's 3 s default read timeout at times, which would fail a
// test for the machine's load.
func interpreters(t *testing.T) []interpreter {
	mr := miniredis.RunT(t)
	mc := redis.NewClient(&redis.Options{Addr: mr.Addr(), ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = mc.Close() })
	return []interpreter{{"redis", redistest.Standalone(t)}, {"miniredis", mc}}
}
