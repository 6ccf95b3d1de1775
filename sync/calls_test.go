package sync_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestCallsPerRound checks how a round's messages become script calls: on
// a single server one call carries every slot group (Tuning.MaxKeysPerCall
// keys at a time), with Tuning.CallPerSlotGroup one call per group, and on a
// cluster one per group whatever the options, since a call must stay in
// one slot.
func TestCallsPerRound(t *testing.T) {
	redistest.NoLeaks(t)
	const keys = 300
	calls := func(rdb hybridlimit.Redis, opts ...hlsync.Option) uint64 {
		t.Helper()
		l, err := hlsync.New(rdb, append(opts, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithTuning(hlsync.Tuning{MaxKeysPerCall: 100}))...)
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			// Each new key fetches alone; Close's final round then hands
			// back every key's lease at once.
			if _, err := l.Allow(context.Background(), fmt.Sprint("k", i), hybridlimit.PerSecond(1000)); err != nil {
				t.Fatal(err)
			}
		}
		before := l.Stats().ScriptCalls
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return l.Stats().ScriptCalls - before
	}
	single := redistest.Standalone(t)
	if n := calls(single); n != 3 {
		t.Errorf("single server: %d calls for %d keys, want 3 (100 keys each)", n, keys)
	}
	if n := calls(single, hlsync.WithTuning(hlsync.Tuning{CallPerSlotGroup: true})); n < 60 {
		t.Errorf("single server, a call per group: %d calls for %d keys over 64 groups, want one per group", n, keys)
	}
	if n := calls(redistest.Cluster(t)); n < 60 {
		t.Errorf("cluster: %d calls for %d keys over 64 groups, want one per group", n, keys)
	}
}
