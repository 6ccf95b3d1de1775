package scripts

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestSyncWireVersion checks the Sync call's wire version on one Redis
// that instances of two versions share during a rolling deploy: a call
// in another version's shape, the first version's header of five ARGV
// without a version or a later version, is refused with an error naming
// the version and writes nothing; and the stored state is no part of the
// wire version: a ledger in the shape every version writes ("seq epoch
// total at" under "l:" and the instance id, written here by hand as an
// instance of the first version leaves it) is continued by this
// version's messages, which never count its total twice.
func TestSyncWireVersion(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	ctx := t.Context()
	p := redistest.Prefix(t)
	bucket, allowances := p+"{v}:b", p+"{v}:a"
	now := int64(1_800_000_000_000_000)
	msg := SyncMsg{Rate: 100, PeriodUS: 1_000_000, Burst: 100, Seq: 10, Epoch: 1, Value: 5, Budget: -1}
	h := SyncHeader{NowUS: now, LedgerTTLMS: 60_000, Mode: ModeReserve, Instance: "new", AllowanceLifeUS: 1_000}
	head := h.Args()

	for name, args := range map[string][]any{
		// The first version's header: five ARGV, then the key's.
		"version 1": append(append([]any{}, head[:SyncHeaderArgs-1]...), bucket, allowances, msg.String()),
		"version 3": append(append(append([]any{}, head[:SyncHeaderArgs-1]...), 3), bucket, allowances, msg.String()),
	} {
		_, err := Sync.Run(ctx, c, []string{bucket}, args...)
		if err == nil || !strings.Contains(err.Error(), "wire version") {
			t.Errorf("%s: error %v, want one naming the wire version", name, err)
		}
		if n := c.Exists(ctx, bucket, allowances).Val(); n != 0 {
			t.Fatalf("%s: %d keys written by a refused call", name, n)
		}
	}

	// An instance of this version takes 30 tokens: the bucket holds 70,
	// its ledger is in the stored shape.
	if _, err := runSync(ctx, c, []string{bucket, allowances}, h, SyncMsg{Rate: 100, PeriodUS: 1_000_000, Burst: 100, Seq: 7, Epoch: 1, Value: 30, Budget: -1}); err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(c.HGet(ctx, bucket, "l:new").Val()); len(f) != 4 || f[0] != "7" || f[1] != "1" || f[2] != "30" {
		t.Fatalf("stored ledger %q, want the shape \"seq epoch total at\": 7 1 30 ...", f)
	}
	// An instance of the first version was granted 30 in all, its last
	// message numbered 7: its ledger as it left it.
	nowS := now / 1_000_000
	c.HSet(ctx, bucket, "l:old", fmt.Sprintf("7 1 30 %d", nowS))
	// Redeployed under the same id, it states the same total again, and
	// then 40: Redis grants the 10 more once.
	for _, tt := range []struct {
		seq, value, total, remaining int64
	}{
		{8, 30, 30, 70},
		{9, 40, 40, 60},
		{9, 40, 40, 60}, // a retry of the same message changes nothing
	} {
		old := h
		old.Instance = "old"
		r, err := runSync(ctx, c, []string{bucket, allowances}, old,
			SyncMsg{Rate: 100, PeriodUS: 1_000_000, Burst: 100, Seq: tt.seq, Epoch: 1, Base: 30, Value: tt.value, Budget: -1})
		if err != nil {
			t.Fatal(err)
		}
		if r[0].Total != tt.total || r[0].Remaining != tt.remaining {
			t.Errorf("seq %d value %d: total %d, remaining %d; want %d, %d", tt.seq, tt.value, r[0].Total, r[0].Remaining, tt.total, tt.remaining)
		}
	}
}
