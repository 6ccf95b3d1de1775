package redistest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestSweepDirs checks that the directories of a test binary that died
// without cleaning up (a panic, a -timeout) go, and those of one running
// and anything else stay: they were left behind for good.
func TestSweepDirs(t *testing.T) {
	tmp := t.TempDir()
	dead := dirPrefix + "2147483646-123"                   // no such process
	live := dirPrefix + strconv.Itoa(os.Getpid()) + "-456" // this one
	other := dirPrefix + "abc"                             // not ours to judge
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, d, "redis.log"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sweepDirs(tmp)
	for d, want := range map[string]bool{dead: false, live: true, other: true} {
		if _, err := os.Stat(filepath.Join(tmp, d)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", d, err == nil, want)
		}
	}
}
