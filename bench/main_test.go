package bench

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain starts the shared redis-server when benchmarks are to run,
// prints its version as a configuration line ("redis: 7.0.15", which
// benchstat carries along), runs the benchmarks, and stops the server.
// Nothing that varies from run to run (such as the load average) goes in a
// configuration line: benchstat would split the results by it.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmarks asked for: nothing to start
	}
	srv, srvErr = startServer()
	if srvErr != nil {
		fmt.Fprintf(os.Stderr, "bench: Redis benchmarks will not run: %v\n", srvErr)
	} else {
		fmt.Printf("redis: %s\n", srv.version)
	}
	code := m.Run()
	if srv != nil {
		srv.stop()
	}
	os.Exit(code)
}
