package lua_test

import (
	"fmt"
	"io/fs"
	"strings"

	"github.com/hybridlimit/hybridlimit/lua"
)

func ExampleFile() {
	src, err := lua.File("gcra.lua")
	if err != nil {
		panic(err)
	}
	first, _, _ := strings.Cut(src, "\n")
	fmt.Println(first)
	// Output: -- gcra.lua: one decision of the generic cell rate algorithm, or a refund.
}

func ExampleFiles() {
	names, err := fs.Glob(lua.Files, "*.lua")
	if err != nil {
		panic(err)
	}
	for _, name := range names {
		fmt.Println(name)
	}
	// Output:
	// bucket.lua
	// clock.lua
	// concurrency_acquire.lua
	// concurrency_release.lua
	// fixed_window.lua
	// gcra.lua
	// hit_counter.lua
	// lock.lua
	// packed.lua
	// preamble.lua
	// presence.lua
	// reset_log.lua
	// reshard.lua
	// sliding_log.lua
	// sliding_window.lua
	// sync.lua
	// sync_reset.lua
	// token_bucket.lua
	// wide.lua
}
