package main

import (
	"strings"
	"testing"
)

const sample = `redis: 7.0.15
goos: linux
goarch: amd64
pkg: github.com/hybridlimit/hybridlimit/bench
cpu: Some CPU
BenchmarkXTimeRateAllow-2   	 1000000	       120.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHybridAllow/keys=1/par=1-2 	13094472	        20.00 ns/op	  50000000 decisions/s	         0.0003598 redis-cmds/op	       0 B/op	       0 allocs/op
    hybrid_test.go:95: BenchmarkHybridAllow 12 logged
PASS
redis: 7.0.15
goos: linux
BenchmarkXTimeRateAllow-2   	 1000000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHybridAllow/keys=1/par=1-2 	13094472	        50.00 ns/op	  20000000 decisions/s	         0.0003598 redis-cmds/op	       0 B/op	       0 allocs/op
PASS
`

func TestParse(t *testing.T) {
	run, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(run.rounds) != 2 {
		t.Fatalf("rounds = %d, want 2", len(run.rounds))
	}
	if got, want := strings.Join(run.names, ","), "BenchmarkXTimeRateAllow,BenchmarkHybridAllow/keys=1/par=1"; got != want {
		t.Errorf("names = %s, want %s", got, want)
	}
	if run.procs != "2" || run.config["redis"] != "7.0.15" || run.config["cpu"] != "Some CPU" {
		t.Errorf("procs %q, config %v", run.procs, run.config)
	}
	// Ratios pair the rounds: 120/20 = 6 and 100/50 = 2.
	r := run.ratios("BenchmarkXTimeRateAllow", "BenchmarkHybridAllow/keys=1/par=1", "ns/op")
	if len(r) != 2 || r[0] != 6 || r[1] != 2 {
		t.Errorf("ratios = %v, want [6 2]", r)
	}
	if m := median(r); m != 4 {
		t.Errorf("median = %v, want 4", m)
	}
}

func TestSplitProcs(t *testing.T) {
	for _, tc := range []struct{ in, name, procs string }{
		{"BenchmarkX-2", "BenchmarkX", "2"},
		{"BenchmarkX/keys=1e4/par=16-8", "BenchmarkX/keys=1e4/par=16", "8"},
		{"BenchmarkX", "BenchmarkX", ""},
		{"BenchmarkX/a-b", "BenchmarkX/a-b", ""},
	} {
		if name, procs := splitProcs(tc.in); name != tc.name || procs != tc.procs {
			t.Errorf("splitProcs(%q) = %q, %q, want %q, %q", tc.in, name, procs, tc.name, tc.procs)
		}
	}
}

func TestQuantity(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{61.23, "ns/op", "61.2 ns"},
		{25300, "ns/op", "25.3 µs"},
		{12_900_000, "decisions/s", "12.9M/s"},
		{18, "allocs/op", "18 allocs/op"},
		{104.6, "B/key", "105 B"},
	} {
		if got := quantity(tc.v, tc.unit); got != tc.want {
			t.Errorf("quantity(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}
