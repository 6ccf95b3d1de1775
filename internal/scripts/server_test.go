package scripts

import (
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestServerKind checks that the server this package's tests run on is
// the one HYBRIDLIMIT_SERVER names (make test runs them on redis-server
// and again on valkey-server), and logs its version: Valkey's INFO has a
// valkey_version field beside the redis_version it keeps for clients.
func TestServerKind(t *testing.T) {
	kind, _, _, err := redistest.Kind()
	if err != nil {
		t.Fatal(err)
	}
	info, err := redistest.Standalone(t).Info(t.Context(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	valkey, isValkey := fields["valkey_version"]
	if isValkey != (kind == "valkey") {
		t.Fatalf("asked for %s, the server says redis_version %q, valkey_version %q", kind, fields["redis_version"], valkey)
	}
	if isValkey {
		t.Logf("valkey %s", valkey)
	} else {
		t.Logf("redis %s", fields["redis_version"])
	}
}
