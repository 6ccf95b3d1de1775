package sim

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

func TestFirstKey(t *testing.T) {
	tests := []struct {
		args []any
		key  string
		ok   bool
	}{
		{[]any{"evalsha", "abc", "2", "hl:{x}:b", "hl:{x}:l"}, "hl:{x}:b", true},
		{[]any{"eval", "return 1", 0}, "", false},
		{[]any{"evalsha", "abc", 1, "k"}, "k", true},
		{[]any{"get", "k"}, "k", true},
		{[]any{"ping"}, "", false},
		{[]any{"client", "setinfo", "lib-name", "x"}, "", false},
		{[]any{"script", "load", "return 1"}, "", false},
		{[]any{"wait", 1, int64(100)}, "", false}, // durable sync's, after its script calls
		{[]any{"WAIT", "1", "100"}, "", false},
		{[]any{"waitaof", 1, 0, int64(100)}, "", false},
	}
	for _, tt := range tests {
		key, ok := firstKey(tt.args)
		if key != tt.key || ok != tt.ok {
			t.Errorf("firstKey(%v) = %q, %v, want %q, %v", tt.args, key, ok, tt.key, tt.ok)
		}
	}
}

func TestCounterCountsCommandsAndSlots(t *testing.T) {
	e, err := newEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cnt := newCmdCounter(true)
	c := e.Client(cnt.Hook())
	defer c.Close()
	ctx := context.Background()
	c.Set(ctx, "{a}:1", "x", 0)
	cnt.SetPhase(phaseRound)
	pipe := c.Pipeline()
	pipe.Get(ctx, "{a}:1")
	pipe.Eval(ctx, "return 1", []string{"{b}:1", "{b}:2"})
	pipe.Ping(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	cnt.Pause()
	c.Get(ctx, "{a}:1")
	cnt.Resume()
	if got := cnt.Total(); got != 4 {
		t.Errorf("Total() = %d, want 4 (one paused command not counted)", got)
	}
	if got := cnt.ByPhase(); got != [phases]int64{1, 3, 0} {
		t.Errorf("ByPhase() = %v, want [1 3 0]", got)
	}
	// Slot of "a" has 2 of 4 commands; the PING has none.
	if got := cnt.HottestSlotShare(); got != 0.5 {
		t.Errorf("HottestSlotShare() = %v, want 0.5", got)
	}
	if hybridlimit.Slot("{a}:1") == hybridlimit.Slot("{b}:1") {
		t.Fatal("test keys share a slot")
	}
	if got := cnt.KeyCommands()["{b}:2"]; got != [phases]int64{0, 1, 0} {
		t.Errorf(`KeyCommands()["{b}:2"] = %v, want [0 1 0]`, got)
	}
}

// TestCounterNodes checks the load counted on each node: a sync call is a
// call and one key message per key it carries, on the node of its keys; a
// command on a key is one of each; a keyless command counts on none.
func TestCounterNodes(t *testing.T) {
	ctx := context.Background()
	nodeOf := func(slot int) int { return modelMaster(slot, ModelMasters) }
	a, b := "{a}:1", ""
	for i := 0; b == "" || nodeOf(hybridlimit.Slot(b)) == nodeOf(hybridlimit.Slot(a)); i++ {
		b = fmt.Sprintf("{b%d}:1", i)
	}
	syncCall := func(buckets ...string) redis.Cmder {
		var keys []scripts.SyncKey
		for _, k := range buckets {
			keys = append(keys, scripts.SyncKey{Bucket: k, Msg: scripts.SyncMsg{Rate: 1, PeriodUS: 1_000_000, Burst: 1, Seq: 1, Epoch: 1, Value: 1, Budget: -1}})
		}
		route, argv := scripts.SyncCall(scripts.SyncHeader{LedgerTTLMS: 60000, Mode: scripts.ModeReserve, Instance: "i0"}, keys...)
		return redis.NewIntSliceCmd(ctx, append([]any{"evalsha", scripts.Sync.Hash(), "1", route[0]}, argv...)...)
	}
	cnt := newCmdCounter(false)
	cnt.count(redis.NewStringCmd(ctx, "get", a), syncCall(a, a, a), syncCall(b), redis.NewStatusCmd(ctx, "ping"))
	want := make([]NodeLoad, ModelMasters)
	want[nodeOf(hybridlimit.Slot(a))] = NodeLoad{KeyMessages: 4, Calls: 2}
	want[nodeOf(hybridlimit.Slot(b))] = NodeLoad{KeyMessages: 1, Calls: 1}
	if got := cnt.Nodes(ModelMasters, nodeOf); !reflect.DeepEqual(got, want) {
		t.Errorf("Nodes() = %+v, want %+v", got, want)
	}
	if got := cnt.Work(); got != 6 {
		t.Errorf("Work() = %d, want 6: 5 key messages and the keyless PING", got)
	}
}
