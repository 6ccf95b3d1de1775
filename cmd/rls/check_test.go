package main_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck runs rls -check as a CI pipeline would, with no Redis: rules
// that load exit 0, rules that do not exit 1 with the error naming the file
// and the line, a missing directory exits 1.
func TestCheck(t *testing.T) {
	t.Parallel()
	good := runtimeDir(t, map[string]string{"basic.yaml": basicYAML})
	bad := runtimeDir(t, map[string]string{"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"})
	twice := runtimeDir(t, map[string]string{"a.yaml": "domain: d\n", "b.yaml": "domain: d\n"})
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"good", []string{"-check", filepath.Join(good, "config")}, 0, []string{"opening config file: " + filepath.Join(good, "config", "basic.yaml"), "all rate limit configs ok"}},
		{"bad", []string{"-check", filepath.Join(bad, "config")}, 1, []string{"error loading rate limit configs:", filepath.Join(bad, "config", "a.yaml") + ":3", `unit "fortnight"`}},
		{"domain twice", []string{"-check", filepath.Join(twice, "config")}, 1, []string{`domain "d" is defined again`}},
		{"domain twice, merged", []string{"-check", filepath.Join(twice, "config"), "-merge_domain_configs"}, 0, []string{"all rate limit configs ok"}},
		{"missing", []string{"-check", filepath.Join(t.TempDir(), "none")}, 1, []string{"error opening directory"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(rlsBinary(t), tt.args...)
			cmd.Env = []string{"PATH=/usr/bin:/bin"} // no Redis, no runtime settings
			out, err := cmd.CombinedOutput()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code {
				t.Fatalf("rls %s: exit %d, want %d:\n%s", strings.Join(tt.args, " "), code, tt.code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
