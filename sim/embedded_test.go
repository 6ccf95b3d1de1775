package sim

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

func TestParseCommand(t *testing.T) {
	tests := []struct {
		in   string
		args []string
		n    int
		err  bool
	}{
		{"", nil, 0, false},
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", []string{"GET", "k"}, 20, false},
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n", []string{"GET", "k"}, 20, false},
		{"*2\r\n$3\r\nGET\r\n$1\r\n", nil, 0, false}, // partial
		{"*2\r\n$3\r\nGE", nil, 0, false},            // partial
		{"*1\r\n$0\r\n\r\n", []string{""}, 10, false},
		{"+OK\r\n", nil, 0, true},
		{"*1\r\n:5\r\n", nil, 0, true},
		{"*x\r\n", nil, 0, true},
	}
	for _, tt := range tests {
		args, n, err := parseCommand([]byte(tt.in))
		if (err != nil) != tt.err || n != tt.n || !slices.Equal(args, tt.args) {
			t.Errorf("parseCommand(%q) = %q, %d, %v; want %q, %d, error %v", tt.in, args, n, err, tt.args, tt.n, tt.err)
		}
	}
}

// TestEmbeddedRunsScriptsOnVirtualTime checks that the embedded Redis runs
// commands, pipelines and Lua, and that Lua's TIME is the clock set.
func TestEmbeddedRunsScriptsOnVirtualTime(t *testing.T) {
	e, err := newEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := e.Client(nil)
	defer c.Close()
	ctx := context.Background()
	at := epoch.Add(1234567 * time.Microsecond)
	e.SetTime(at)
	got, err := c.Eval(ctx, "local t = redis.call('TIME'); return tonumber(t[1]) * 1000000 + tonumber(t[2])", nil).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if got != at.UnixMicro() {
		t.Errorf("Lua TIME = %d, want %d", got, at.UnixMicro())
	}
	pipe := c.Pipeline()
	pipe.Set(ctx, "a", "1", 0)
	get := pipe.Get(ctx, "a")
	if _, err := pipe.Exec(ctx); err != nil || get.Val() != "1" {
		t.Errorf("pipeline GET = %q, %v, want 1", get.Val(), err)
	}
	big := string(make([]byte, 100_000)) // spans several writes
	if err := c.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.StrLen(ctx, "big").Result(); err != nil || n != int64(len(big)) {
		t.Errorf("STRLEN big = %d, %v, want %d", n, err, len(big))
	}
}

// TestEmbeddedClientsResolveNothing: the clients of a virtual run, named
// rather than addressed, have go-redis's maintenance notifications off, so
// that making one does not look its name up in DNS (see offline).
func TestEmbeddedClientsResolveNothing(t *testing.T) {
	emb, err := newEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	c := emb.Client(nil)
	m := newModelCluster(c, ModelMasters)
	defer m.Close()
	for _, cl := range append([]*redis.Client{c}, m.masters...) {
		o := cl.Options()
		if o.MaintNotificationsConfig == nil || o.MaintNotificationsConfig.Mode != maintnotifications.ModeDisabled {
			t.Errorf("client of %s: maintenance notifications %+v, want off", o.Addr, o.MaintNotificationsConfig)
		}
	}
}
