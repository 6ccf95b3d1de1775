package sync_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestCallsPerRound checks how a round's messages become script calls:
// one call per Redis node, Tuning.MaxKeysPerCall keys at a time, whatever
// the slot groups the keys spread over: on a single server one node, on a
// cluster each master, a call carrying the keys of every slot it serves.
func TestCallsPerRound(t *testing.T) {
	redistest.NoLeaks(t)
	const keys, perCall = 300, 100
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprint("k", i)
	}
	// calls returns the script calls of Close's final round, which hands
	// back every key's lease at once (each new key fetched alone).
	calls := func(rdb hybridlimit.Redis, prefix string) uint64 {
		t.Helper()
		l, err := hlsync.New(rdb, hlsync.WithPrefix(prefix), hlsync.WithTuning(hlsync.Tuning{MaxKeysPerCall: perCall}))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range names {
			if _, err := l.Allow(context.Background(), k, hybridlimit.PerSecond(1000)); err != nil {
				t.Fatal(err)
			}
		}
		before := l.Stats().ScriptCalls
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return l.Stats().ScriptCalls - before
	}
	if n := calls(redistest.Standalone(t), redistest.Prefix(t)); n != keys/perCall {
		t.Errorf("single server: %d calls for %d keys, want %d (%d keys each)", n, keys, keys/perCall, perCall)
	}

	cc := redistest.Cluster(t)
	prefix := redistest.Prefix(t)
	probe, err := hlsync.New(cc, hlsync.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	owners := redistest.SlotOwners(t, cc)
	perMaster := make(map[string]int)
	for _, k := range names {
		bucket, _ := probe.Keys(k)
		perMaster[owners[hybridlimit.Slot(bucket)]]++
	}
	var want uint64
	for _, n := range perMaster {
		want += uint64((n + perCall - 1) / perCall)
	}
	if n := calls(cc, prefix); n != want {
		t.Errorf("cluster: %d calls for %d keys on masters %v, want %d (one a master, %d keys each)", n, keys, perMaster, want, perCall)
	}
	t.Logf("cluster: %d keys on masters %v: %d calls", keys, perMaster, want)
}

// TestSlotMovedUnderCall checks what a call does when a slot moves between
// masters behind the limiter's back: the master that no longer serves the
// slot answers its keys' messages "elsewhere", writing nothing, and the
// round sends them again to the new master, so every lease comes back and
// no token is lost or counted twice.
func TestSlotMovedUnderCall(t *testing.T) {
	defaultBuildOnly(t)
	redistest.NoLeaks(t)
	cl := redistest.NewCluster(t)
	cc := cl.Client(t)
	prefix := redistest.Prefix(t)
	l, err := hlsync.New(cc, hlsync.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	owners := redistest.SlotOwners(t, cc)
	slotOf := func(key string) int {
		bucket, _ := l.Keys(key)
		return hybridlimit.Slot(bucket)
	}
	// Two keys of different slots on one master.
	a, b := "a", ""
	for i := 0; b == ""; i++ {
		k := fmt.Sprint("b", i)
		if slotOf(k) != slotOf(a) && owners[slotOf(k)] == owners[slotOf(a)] {
			b = k
		}
	}
	limit := hybridlimit.PerSecond(1000) // high enough to lease ahead of demand
	for _, k := range []string{a, b} {
		if r, err := l.Allow(context.Background(), k, limit); err != nil || !r.Allowed {
			t.Fatalf("Allow(%s) = %+v, %v", k, r, err)
		}
	}
	from, _ := cl.SlotOwner(t, slotOf(b))
	var to *redistest.Server
	for _, m := range cl.Masters(t) {
		if m != from {
			to = m
		}
	}
	cl.MoveSlot(t, slotOf(b), to)
	// Close's final round hands both leases back in one call to a's and
	// b's old master, which answers b's elsewhere.
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := l.Stats().Elsewhere; n == 0 {
		t.Errorf("Stats().Elsewhere = 0, want b's message answered elsewhere")
	}
	// Each key's ledger says what the instance kept of what it was
	// granted: the one token it admitted, its lease handed back.
	for _, k := range []string{a, b} {
		bucket, _ := l.Keys(k)
		ledger, err := cc.HGet(context.Background(), bucket, scripts.SyncLedgerField(l.InstanceID())).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := scripts.ParseSyncLedger(ledger); err != nil || got.Total != 1 {
			t.Errorf("%s: ledger %+v (%v) after 1 admitted and Close, want a total of 1", k, got, err)
		}
	}
}
