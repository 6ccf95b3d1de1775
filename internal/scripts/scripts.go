package scripts

import (
	"strings"

	"github.com/hybridlimit/hybridlimit/lua"
)

// The scripts of the limiters. Each file's header gives its KEYS, ARGV and
// reply; all but ConcurrencyRelease reply in the shape DecodeDecision reads.
// Each is built from the shared files it uses (see load).
// They are package variables for convenience: do not reassign them.
var (
	TokenBucket        = load("token_bucket", clock, preamble, wide)
	GCRA               = load("gcra", clock, wide)
	FixedWindow        = load("fixed_window", clock, preamble)
	SlidingWindow      = load("sliding_window", clock, preamble, wide)
	SlidingLog         = load("sliding_log", clock, preamble)
	ConcurrencyAcquire = load("concurrency_acquire", clock, preamble)
	ConcurrencyRelease = load("concurrency_release", clock)
)

// All returns every script of the package, for warming a script cache or
// for tests.
func All() []*Script {
	return []*Script{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog, ConcurrencyAcquire, ConcurrencyRelease}
}

// flagged returns s with a shebang declaring flags (Redis 7 script flags)
// before its source, under the same name. The flags are the script's
// first line, where Redis reads them; servers that do not know them (an
// embedded Redis for tests) must run s itself.
func flagged(s *Script, flags string) *Script {
	return NewScript(s.name, "#!lua flags="+flags+"\n"+s.src)
}

// The shared files a script may be built from, in the order they must come:
// each may use the ones before it.
const (
	clock    = "clock"    // now_us: the scripts' clock
	preamble = "preamble" // arguments, exact division, TTLs
	wide     = "wide"     // wide: exact products past 2^53
	bucket   = "bucket"   // the hybrid limiter's bucket
	packed   = "packed"   // the hybrid limiter's binary numbers
)

// load builds the Script for name.lua: the shared files it names, in order,
// then the body. A script takes only the files it uses, because Redis makes
// every function a file defines again on each run of the script. The files
// are compiled into the binary, so a missing one is a build mistake that
// the package's tests catch; it panics at init rather than shipping a
// limiter without its script.
func load(name string, shared ...string) *Script {
	var b strings.Builder
	for _, part := range shared {
		b.Write(mustRead(part))
		b.WriteByte('\n')
	}
	b.Write(mustRead(name))
	return NewScript(name, b.String())
}

// mustRead returns the file name.lua of package lua.
func mustRead(name string) []byte {
	src, err := lua.Files.ReadFile(name + ".lua")
	if err != nil {
		panic("scripts: " + err.Error())
	}
	return src
}
