package hybridlimit

import "testing"

func TestErrorClassString(t *testing.T) {
	want := []string{"timeout", "connection", "error_reply", "malformed_reply",
		"unavailable", "closed", "invalid", "canceled", "other", "ErrorClass(9)"}
	for c := range NumErrorClasses + 1 {
		if got := c.String(); got != want[c] {
			t.Errorf("ErrorClass(%d).String() = %q, want %q", c, got, want[c])
		}
	}
}

// TestErrorClassSets: the two kinds of failure share only ErrorOther, and
// every class belongs to one of them.
func TestErrorClassSets(t *testing.T) {
	seen := map[ErrorClass]int{}
	for _, c := range RedisErrorClasses() {
		seen[c]++
	}
	for _, c := range LimiterErrorClasses() {
		seen[c]++
	}
	for c := range NumErrorClasses {
		want := 1
		if c == ErrorOther {
			want = 2
		}
		if seen[c] != want {
			t.Errorf("%v is in %d of the two sets, want %d", c, seen[c], want)
		}
	}
}

func TestFailurePolicyString(t *testing.T) {
	want := []string{"fallback-local", "fail-open", "fail-closed", "error", "FailurePolicy(4)"}
	for p := range NumFailurePolicies + 1 {
		if got := p.String(); got != want[p] {
			t.Errorf("FailurePolicy(%d).String() = %q, want %q", p, got, want[p])
		}
	}
}
