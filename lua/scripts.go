package lua

import (
	"embed"
	"strings"
)

//go:embed *.lua
var files embed.FS

// The scripts of the limiters. Each file's header gives its KEYS, ARGV and
// reply; all but ConcurrencyRelease reply in the shape DecodeDecision reads.
// They are package variables for convenience: do not reassign them.
var (
	TokenBucket        = load("token_bucket")
	GCRA               = load("gcra")
	FixedWindow        = load("fixed_window")
	SlidingWindow      = load("sliding_window")
	SlidingLog         = load("sliding_log")
	ConcurrencyAcquire = load("concurrency_acquire")
	ConcurrencyRelease = load("concurrency_release")
)

// All returns every script of the package, for warming a script cache or
// for tests.
func All() []*Script {
	return []*Script{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog, ConcurrencyAcquire, ConcurrencyRelease}
}

// File returns the text of an embedded file, such as "gcra.lua", as it is
// on disk: without the preamble. It is for tests and documentation.
func File(file string) (string, error) {
	b, err := files.ReadFile(file)
	return string(b), err
}

// flagged returns s with a shebang declaring flags (Redis 7 script flags)
// before its source, under the same name. The flags are the script's
// first line, where Redis reads them; servers that do not know them (an
// embedded Redis for tests) must run s itself.
func flagged(s *Script, flags string) *Script {
	return NewScript(s.name, "#!lua flags="+flags+"\n"+s.src)
}

// load builds the Script for name.lua: the preamble followed by the body.
// The files are compiled into the binary, so a missing one is a build
// mistake that the package's tests catch; it panics at init rather than
// shipping a limiter without its script.
func load(name string) *Script {
	pre, err := files.ReadFile("preamble.lua")
	if err != nil {
		panic("lua: " + err.Error())
	}
	body, err := files.ReadFile(name + ".lua")
	if err != nil {
		panic("lua: " + err.Error())
	}
	var b strings.Builder
	b.Grow(len(pre) + len(body) + 1)
	b.Write(pre)
	b.WriteByte('\n')
	b.Write(body)
	return NewScript(name, b.String())
}
