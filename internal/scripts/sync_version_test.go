package scripts

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestSyncWireVersion checks the Sync call's wire version on one Redis
// that instances of several versions share during a rolling deploy: a call
// in another version's shape (the first version's header of five ARGV
// without a version, the second's text messages, a later version) is
// refused with an error naming the version and writes nothing. The
// ledgers are versioned with the wire: this version's are binary under
// "lb:" and the instance id, and a ledger version 2 left as text under
// "l:" ("seq epoch total at") is neither read nor overwritten; an instance
// redeployed under the same id continues from the total its messages
// state as held (base), and is granted what is above it once.
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
		"version 2": append(append(append([]any{}, head[:SyncHeaderArgs-1]...), 2), bucket, allowances, "100 1000000 100 10 1 0 5 -1 0 0 0"),
		"version 4": append(append(append([]any{}, head[:SyncHeaderArgs-1]...), 4), bucket, allowances, msg.String()),
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
	l, err := ParseSyncLedger(c.HGet(ctx, bucket, SyncLedgerField("new")).Val())
	if err != nil || l.Seq != 7 || l.Epoch != 1 || l.Total != 30 || l.AtS != now/1_000_000 {
		t.Fatalf("stored ledger %+v, %v; want seq 7, epoch 1, total 30, at %d", l, err, now/1_000_000)
	}
	// An instance of version 2 was granted 30 in all, its last message
	// numbered 7: its ledger as it left it.
	nowS := now / 1_000_000
	old := fmt.Sprintf("7 1 30 %d", nowS)
	c.HSet(ctx, bucket, "l:old", old)
	// Redeployed under the same id, it states the same total again, and
	// then 40: Redis grants the 10 more once.
	for _, tt := range []struct {
		seq, value, total, remaining int64
	}{
		{8, 30, 30, 70},
		{9, 40, 40, 60},
		{9, 40, 40, 60}, // a retry of the same message changes nothing
	} {
		h := h
		h.Instance = "old"
		r, err := runSync(ctx, c, []string{bucket, allowances}, h,
			SyncMsg{Rate: 100, PeriodUS: 1_000_000, Burst: 100, Seq: tt.seq, Epoch: 1, Base: 30, Value: tt.value, Budget: -1})
		if err != nil {
			t.Fatal(err)
		}
		if r[0].Total != tt.total || r[0].Remaining != tt.remaining {
			t.Errorf("seq %d value %d: total %d, remaining %d; want %d, %d", tt.seq, tt.value, r[0].Total, r[0].Remaining, tt.total, tt.remaining)
		}
	}
	if got := c.HGet(ctx, bucket, "l:old").Val(); got != old {
		t.Errorf("version 2's ledger %q, want it as it left it, %q", got, old)
	}
}
