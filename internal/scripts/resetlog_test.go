package scripts

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestResetLog holds the reset log (reset_log.lua, read by presence.lua)
// to what a reader needs: every key reset at or after its last read, or
// word that it cannot tell (Whole false), never a silent gap. Times are
// the caller's (ARGV[1]), in microseconds; the log keeps a reset for keep
// milliseconds.
func TestResetLog(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	ctx := context.Background()
	const keep = 60_000 // ms
	const t0 = int64(1_700_000_000_000_000)
	prefix := redistest.Prefix(t)
	var n int
	newLog := func() (presence, log string) {
		n++
		return fmt.Sprintf("%s{p%d}:instances", prefix, n), fmt.Sprintf("%s{p%d}:resets", prefix, n)
	}
	reset := func(log string, at int64, key string) {
		t.Helper()
		if _, err := ResetLog.Run(ctx, rdb, []string{log}, at, key, keep); err != nil {
			t.Fatal(err)
		}
	}
	read := func(presence, log string, at, since int64) PresenceReply {
		t.Helper()
		raw, err := Presence.Run(ctx, rdb, []string{presence, log}, at, "i", int64(1e6), "1", since, keep)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParsePresenceReply(raw)
		if err != nil {
			t.Fatal(err)
		}
		if r.Now != at || r.Live != 1 {
			t.Fatalf("presence at %d: now %d, live %d; want %d, 1", at, r.Now, r.Live, at)
		}
		slices.Sort(r.Reset)
		return r
	}
	check := func(what string, got PresenceReply, whole bool, keys ...string) {
		t.Helper()
		if got.Whole != whole || !slices.Equal(got.Reset, keys) && len(got.Reset)+len(keys) > 0 {
			t.Errorf("%s: whole %v, keys %q; want %v, %q", what, got.Whole, got.Reset, whole, keys)
		}
	}

	t.Run("since", func(t *testing.T) {
		p, log := newLog()
		check("a first read of an empty log", read(p, log, t0, 0), true)
		check("nothing reset", read(p, log, t0+10, t0), true)
		reset(log, t0+20, "a")
		reset(log, t0+30, "b{x}")
		if _, err := ResetLog.Run(ctx, rdb, []string{log}, t0+30, "", keep); err == nil {
			t.Error("the empty key, which marks what the log dropped, was taken")
		}
		check("both, since before them", read(p, log, t0+40, t0+10), true, "a", "b{x}")
		check("the reset at since itself counts", read(p, log, t0+50, t0+30), true, "b{x}")
		check("none after", read(p, log, t0+60, t0+31), true)
		check("a first read takes all the log keeps", read(p, log, t0+60, 0), true, "a", "b{x}")
		reset(log, t0+70, "a")
		check("a key reset again", read(p, log, t0+80, t0+60), true, "a")
	})
	t.Run("old read", func(t *testing.T) {
		p, log := newLog()
		reset(log, t0, "a")
		check("within keep", read(p, log, t0+keep*1000, t0), true, "a")
		check("past keep", read(p, log, t0+keep*1000+1, t0), false)
	})
	t.Run("expiry", func(t *testing.T) {
		p, log := newLog()
		reset(log, t0, "a")
		reset(log, t0+keep*1000+5, "b") // "a" ages out
		check("after a's age", read(p, log, t0+keep*1000+6, t0+keep*1000), true, "b")
		ttl, err := rdb.PTTL(ctx, log).Result()
		if err != nil || ttl <= 0 {
			t.Errorf("the log's TTL = %v, %v; want one", ttl, err)
		}
	})
	t.Run("cap", func(t *testing.T) {
		p, log := newLog()
		const capacity = 4096
		for i := range capacity + 10 {
			reset(log, t0+int64(i), fmt.Sprintf("k%d", i))
		}
		if got := rdb.ZCard(ctx, log).Val(); got != capacity+1 {
			t.Errorf("log holds %d members, want the cap %d and the dropped mark", got, capacity)
		}
		check("a read from before the dropped ones", read(p, log, t0+capacity+20, t0+9), false)
		check("a first read, some dropped", read(p, log, t0+capacity+20, 0), false)
		got := read(p, log, t0+capacity+20, t0+capacity+10-3)
		check("a read from after them", got, true, fmt.Sprintf("k%d", capacity+7), fmt.Sprintf("k%d", capacity+8), fmt.Sprintf("k%d", capacity+9))
	})
	t.Run("reply bound", func(t *testing.T) {
		p, log := newLog()
		for i := range 257 {
			reset(log, t0+int64(i), fmt.Sprintf("k%d", i))
		}
		check("257 keys", read(p, log, t0+1000, t0), false)
		if got := read(p, log, t0+1000, t0+1); len(got.Reset) != 256 || !got.Whole {
			t.Errorf("256 keys: whole %v, %d keys; want true, 256", got.Whole, len(got.Reset))
		}
	})
	t.Run("probe", func(t *testing.T) {
		// The probe runs presence on a key of its own, without the log.
		raw, err := Presence.Run(ctx, rdb, []string{prefix + "{probe}:probe"}, t0, "i", int64(1e6), "1")
		if err != nil {
			t.Fatal(err)
		}
		if r, err := ParsePresenceReply(raw); err != nil || !r.Whole || len(r.Reset) != 0 {
			t.Errorf("probe reply %+v, %v; want whole, no keys", r, err)
		}
	})
	redistest.CheckTTLs(t, rdb, prefix)
}

func TestParsePresenceReply(t *testing.T) {
	for _, bad := range []any{
		int64(3), []any{int64(1), int64(2)}, []any{int64(1), int64(0), int64(1)},
		[]any{int64(-1), int64(5), int64(1)}, []any{int64(1), int64(5), int64(2)},
		[]any{int64(1), int64(5), int64(0), "k"}, []any{int64(1), int64(5), int64(1), int64(7)},
		[]any{"1", int64(5), int64(1)},
	} {
		if r, err := ParsePresenceReply(bad); err == nil {
			t.Errorf("ParsePresenceReply(%v) = %+v, want an error", bad, r)
		}
	}
}
