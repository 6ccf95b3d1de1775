package scripts

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestSyncMsgRoundTrip(t *testing.T) {
	for _, m := range []SyncMsg{
		{},
		{Rate: 1000, PeriodUS: 1_000_000, Burst: 1000, Seq: 1_700_000_000_000_001, Epoch: 1_700_000_000_000_000, Base: 12, Value: 18, Budget: -1, Held: -1, Owed: 15, AgeUS: 2_000_000},
		{Rate: maxExact - 1, PeriodUS: maxExact - 1, Burst: maxExact - 1, Seq: maxExact - 1, Epoch: 1, Base: maxExact - 1, Value: 0, Budget: 5, Held: 7, Owed: maxExact - 1, AgeUS: maxExact - 1},
	} {
		s := m.String()
		if len(s) != SyncMsgLen {
			t.Errorf("%+v.String() is %d bytes, want %d", m, len(s), SyncMsgLen)
		}
		got, err := ParseSyncMsg(s)
		if err != nil || got != m {
			t.Errorf("ParseSyncMsg(%q) = %+v, %v; want %+v", s, got, err, m)
		}
	}
	ones := make([]float64, syncMsgFields)
	for i := range ones {
		ones[i] = 1
	}
	for name, s := range map[string]string{
		"empty":         "",
		"ten fields":    packDoubles(ones[1:]...),
		"twelve fields": packDoubles(append(ones, 1)...),
		"a fraction":    packDoubles(append([]float64{0.5}, ones[1:]...)...),
		"2^53":          packDoubles(append([]float64{1 << 53}, ones[1:]...)...),
	} {
		if m, err := ParseSyncMsg(s); err == nil {
			t.Errorf("ParseSyncMsg(%s) = %+v, want an error", name, m)
		}
	}
}

// packDoubles packs vs as sync.lua reads them, little-endian doubles.
func packDoubles(vs ...float64) string {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return string(b)
}

// TestSyncBadMessage checks that the script refuses a message it cannot
// parse rather than read it as zeros.
func TestSyncBadMessage(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	keys := []string{p + "{s}:b", p + "{s}:a"}
	good := SyncMsg{Rate: 1, PeriodUS: 1_000_000, Burst: 1, Seq: 5, Epoch: 5, Value: 1, Budget: -1, Held: -1}.String()
	for name, msg := range map[string]string{
		"text":        "1 1000000 1 5 5 0 1 -1 -1 0 0",
		"short":       good[:SyncMsgLen-8],
		"long":        good + good[:8],
		"rate 0":      SyncMsg{Rate: 0, PeriodUS: 1_000_000, Burst: 1, Seq: 5, Epoch: 5, Value: 1, Budget: -1}.String(),
		"value -1":    SyncMsg{Rate: 1, PeriodUS: 1_000_000, Burst: 1, Seq: 5, Epoch: 5, Value: -1, Budget: -1}.String(),
		"budget -2":   SyncMsg{Rate: 1, PeriodUS: 1_000_000, Burst: 1, Seq: 5, Epoch: 5, Value: 1, Budget: -2}.String(),
		"owed -1":     SyncMsg{Rate: 1, PeriodUS: 1_000_000, Burst: 1, Seq: 5, Epoch: 5, Value: 1, Budget: -1, Owed: -1}.String(),
		"age -1":      SyncMsg{Rate: 1, PeriodUS: 1_000_000, Burst: 1, Seq: 5, Epoch: 5, Value: 1, Budget: -1, AgeUS: -1}.String(),
		"period 0":    SyncMsg{Rate: 1, PeriodUS: 0, Burst: 1, Seq: 5, Epoch: 5, Value: 1, Budget: -1}.String(),
		"burst -1":    SyncMsg{Rate: 1, PeriodUS: 1_000_000, Burst: -1, Seq: 5, Epoch: 5, Value: 1, Budget: -1}.String(),
		"not a value": packDoubles(1, 1_000_000, 1, 5, 5, 0, math.NaN(), -1, -1, 0, 0),
	} {
		h := SyncHeader{LedgerTTLMS: 60_000, Mode: ModeReserve, Instance: "i", AllowanceLifeUS: 1_000}.Args()
		_, err := Sync.Run(t.Context(), c, keys[:1], append(h[:], keys[0], msg)...)
		if err == nil || !strings.Contains(err.Error(), "is not a message") {
			t.Errorf("message %s: error %v, want a script error", name, err)
		}
	}
	if n := c.Exists(t.Context(), keys...).Val(); n != 0 {
		t.Errorf("%d keys written by refused messages", n)
	}
	// A call of another shape: KEYS[1] not the first bucket, or a key's
	// arguments short or long for the mode (reserve: bucket and message;
	// optimistic: bucket, allowances and message).
	msg := SyncMsg{Rate: 1, PeriodUS: 1_000_000, Burst: 1, Seq: 5, Epoch: 5, Value: 1, Budget: -1}.String()
	h := SyncHeader{LedgerTTLMS: 60_000, Mode: ModeReserve, Instance: "i", AllowanceLifeUS: 1_000}.Args()
	o := SyncHeader{LedgerTTLMS: 60_000, Mode: ModeOptimistic, Instance: "i", AllowanceLifeUS: 1_000}.Args()
	for _, call := range []struct {
		keys []string
		args []any
		want string
	}{
		{keys[1:], append(h[:], keys[0], msg), "2 ARGV a key in reserve mode"},
		{keys[:1], append(h[:], keys[0]), "2 ARGV a key in reserve mode"},
		{keys[:1], append(h[:], keys[0], keys[1], msg), "2 ARGV a key in reserve mode"},
		{keys[:1], h[:], "2 ARGV a key in reserve mode"},
		{keys[:1], append(o[:], keys[0], msg), "3 ARGV a key in optimistic mode"},
		{keys[:1], append(o[:], keys[0], keys[1], msg, keys[0]), "3 ARGV a key in optimistic mode"},
	} {
		if _, err := Sync.Run(t.Context(), c, call.keys, call.args...); err == nil || !strings.Contains(err.Error(), call.want) {
			t.Errorf("KEYS %q, ARGV %q: error %v, want the call's shape refused (%s)", call.keys, call.args, err, call.want)
		}
	}
}

// TestIntsReply checks that a reply which is not an array of integers
// counts as malformed, and an error reply as what it is.
func TestIntsReply(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	for _, tt := range []struct {
		src       string
		want      []int64
		malformed bool
	}{
		{"return {1, 2, 3}", []int64{1, 2, 3}, false},
		{"return 'x'", nil, true},
		{"return {1, 'x', 3}", nil, true},
		{"return {1, {2}, 3}", nil, true},
		{"return redis.error_reply('NOPE no')", nil, false},
	} {
		s := NewScript("t", tt.src)
		if err := c.ScriptLoad(t.Context(), tt.src).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := IntsReply(s.EvalShaInts(t.Context(), c, []string{"{t}:k"}, nil))
		if errors.Is(err, ErrMalformedReply) != tt.malformed || (err == nil) != (tt.want != nil) || !slices.Equal(got, tt.want) {
			t.Errorf("%s: IntsReply = %v, %v; want %v, malformed %v", tt.src, got, err, tt.want, tt.malformed)
		}
	}
}

// runSync calls Sync with h and msgs and parses the reply.
func runSync(ctx context.Context, c redis.Scripter, keys []string, h SyncHeader, msgs ...SyncMsg) ([]SyncReply, error) {
	sk := make([]SyncKey, len(msgs))
	for i, m := range msgs {
		sk[i] = SyncKey{Bucket: keys[2*i], Allowances: keys[2*i+1], Msg: m}
	}
	route, args := SyncCall(h, sk...)
	reply, err := Sync.Run(ctx, c, route, args...)
	if err != nil {
		return nil, err
	}
	out := make([]SyncReply, len(msgs))
	return out, ParseSyncReplies(reply, out)
}

// TestParseSyncReplies checks that a reply is taken apart field by field,
// and that one of another length, a negative field, a status other than
// 0, 1 and 2, an elsewhere with another field set or a generation without
// shards is malformed.
func TestParseSyncReplies(t *testing.T) {
	got := make([]SyncReply, 3)
	if err := ParseSyncReplies([]int64{1, 2, 3, 4, 5, 0, 0, 8, 0, 11, 12, 13, 14, 15, 4, 2, 18, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2}, got); err != nil {
		t.Fatal(err)
	}
	want := []SyncReply{
		{Total: 1, Remaining: 2, RetryUS: 3, ResetUS: 4, Allowance: 5, LedgerSeq: 8},
		{Total: 11, Remaining: 12, RetryUS: 13, ResetUS: 14, Allowance: 15, Shards: 4, Generation: 2, LedgerSeq: 18, Reset: true},
		{Elsewhere: true},
	}
	if !slices.Equal(got, want) || got[0].Moved() || !got[1].Moved() {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range [][]int64{
		{1, 2, 3, 4, 5, 0, 0, 8},
		{1, 2, 3, 4, 5, 0, 0, 8, 0, 0},
		{1, -2, 3, 4, 5, 0, 0, 8, 0},
		{1, 2, 3, 4, 5, 0, 0, 8, 3},
		{1, 0, 0, 0, 0, 0, 0, 0, 2},
		{1, 2, 3, 4, 5, 0, 3, 8, 0},
	} {
		if err := ParseSyncReplies(bad, got[:1]); !errors.Is(err, ErrMalformedReply) {
			t.Errorf("ParseSyncReplies(%v) = %v, want ErrMalformedReply", bad, err)
		}
	}
	if err := ParseSyncReplies([]any{int64(1), "x"}, nil); !errors.Is(err, ErrMalformedReply) {
		t.Errorf("a reply of another type: %v, want ErrMalformedReply", err)
	}
}

// TestSyncUnknownMode checks that the script refuses a mode it does not
// know rather than take it for one it does.
func TestSyncUnknownMode(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	keys := []string{p + "{s}:b", p + "{s}:a"}
	msg := SyncMsg{Rate: 1, PeriodUS: 1_000_000, Burst: 1, Seq: 5, Epoch: 5, Value: 1, Budget: -1}
	for _, mode := range []SyncMode{"r", "o", "report", ""} {
		_, err := runSync(t.Context(), c, keys, SyncHeader{LedgerTTLMS: 60_000, Mode: mode, Instance: "i", AllowanceLifeUS: 1_000}, msg)
		if err == nil || !strings.Contains(err.Error(), "unknown mode") {
			t.Errorf("mode %q: error %v, want unknown mode", mode, err)
		}
	}
	if n := c.Exists(t.Context(), keys...).Val(); n != 0 {
		t.Errorf("a refused call wrote %d keys", n)
	}
}
