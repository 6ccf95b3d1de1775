package scripts

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestSyncBucketHash checks the bucket hash that sync.lua keeps a key in:
// its expiry covers both the bucket's state and the ledger TTL after the
// last message, and is extended only when it falls short; the ledgers of
// instances gone quiet for a ledger TTL are deleted by the next instance
// new to the key once the hash holds more than a few, and the live ones
// are kept.
func TestSyncBucketHash(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	ctx := t.Context()
	p := redistest.Prefix(t)
	keys := []string{p + "{s}:b", p + "{s}:a"}
	const ledgerTTL = 60_000 // ms
	now := int64(1_800_000_000_000_000)
	seq := int64(1_000)
	send := func(id string, value int64) {
		t.Helper()
		seq++
		// 10 tokens an hour: a token refills in 6 minutes, past the TTL.
		msg := SyncMsg{Rate: 10, PeriodUS: 3_600_000_000, Burst: 10, Seq: seq, Epoch: 1, Value: value, Budget: -1}
		if _, err := runSync(ctx, c, keys, SyncHeader{NowUS: now, LedgerTTLMS: ledgerTTL, Mode: ModeReserve, Instance: id, AllowanceLifeUS: 1_000}, msg); err != nil {
			t.Fatal(err)
		}
	}
	expiry := func() (x string, ttl time.Duration) {
		t.Helper()
		return c.HGet(ctx, keys[0], "x").Val(), c.PTTL(ctx, keys[0]).Val()
	}

	// One token taken: the state lives 6 minutes, longer than a ledger.
	send("old0", 1)
	x, ttl := expiry()
	if ttl < 6*time.Minute || ttl > 6*time.Minute+ledgerTTL/2*time.Millisecond+time.Second {
		t.Errorf("TTL %v after one token of 10 an hour, want 6m plus at most half a ledger TTL", ttl)
	}
	// A message that changes nothing the expiry must cover leaves it.
	now += int64(time.Second / time.Microsecond)
	send("old0", 1)
	if x2, _ := expiry(); x2 != x {
		t.Errorf("expiry moved from %s to %s by a message the old one covered", x, x2)
	}

	// More ledgers than a newcomer tolerates, all of them soon stale.
	for i := 1; i < 20; i++ {
		send(fmt.Sprint("old", i), 0)
	}
	// Version 2's text ledgers, one written before the TTL, one after.
	c.HSet(ctx, keys[0], "l:v2stale", fmt.Sprintf("5 1 0 %d", now/1_000_000))
	now += (ledgerTTL + 1_000) * 1_000
	for i := range 3 {
		send(fmt.Sprint("old", i), 1) // written again: live
	}
	c.HSet(ctx, keys[0], "l:v2live", fmt.Sprintf("5 1 0 %d", now/1_000_000))
	send("new", 0)
	if got := c.HMGet(ctx, keys[0], "l:v2stale", "l:v2live").Val(); got[0] != nil || got[1] == nil {
		t.Errorf("version 2's ledgers after a newcomer: stale %v, live %v; want the live one only", got[0], got[1])
	}
	var ledgers []string
	for _, f := range c.HKeys(ctx, keys[0]).Val() {
		if strings.HasPrefix(f, SyncLedgerField("")) {
			ledgers = append(ledgers, f)
		}
	}
	slices.Sort(ledgers)
	if want := []string{SyncLedgerField("new"), SyncLedgerField("old0"), SyncLedgerField("old1"), SyncLedgerField("old2")}; !slices.Equal(ledgers, want) {
		t.Errorf("ledgers after a newcomer = %v, want %v: the live ones only", ledgers, want)
	}
	if c.HGet(ctx, keys[0], "t").Val() == "" {
		t.Error("the bucket's time went with the stale ledgers")
	}
	if noTTL, _ := redistest.KeysWithoutTTL(t, c, p); len(noTTL) > 0 {
		t.Errorf("keys without TTL: %v", noTTL)
	}
}

// TestSyncSmallGrantsAtHighRates asks, one token a message at a frozen
// clock, for more than the burst of a key refilled at 10M tokens a second.
// A token is then a tenth of a microsecond, less than half the step of a
// float counting microseconds since the epoch (a quarter), so adding it
// to the bucket's time changed nothing and every token was free: all 1,500
// were granted against a burst of 1,000. Each grant and return must move
// the bucket's time by at least what it is worth, rounded against the
// instances, and tokens handed back must not make more than were taken.
func TestSyncSmallGrantsAtHighRates(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	ctx := t.Context()
	p := redistest.Prefix(t)
	keys := []string{p + "{g}:b", p + "{g}:a"}
	now := int64(1_800_000_000_000_000)
	seq, total := int64(0), int64(0)
	send := func(value int64) {
		t.Helper()
		seq++
		msg := SyncMsg{Rate: 10_000_000, PeriodUS: 1_000_000, Burst: 1_000, Seq: seq, Epoch: 1, Base: total, Value: value, Budget: -1}
		r, err := runSync(ctx, c, keys, SyncHeader{NowUS: now, LedgerTTLMS: 60_000, Mode: ModeReserve, Instance: "i0", AllowanceLifeUS: 1_000}, msg)
		if err != nil {
			t.Fatal(err)
		}
		total = r[0].Total
	}
	for range 1_500 {
		send(total + 1)
	}
	if total < 1 || total > 1_000 {
		t.Fatalf("granted %d tokens one at a time at a frozen clock, burst 1000", total)
	}
	granted := total
	// Hand them all back one at a time, then take again: the bucket may
	// not hold more than it did at first.
	for total > 0 {
		send(total - 1)
	}
	for range 1_500 {
		send(total + 1)
	}
	if total > granted {
		t.Errorf("after handing back %d tokens one at a time, %d could be taken again", granted, total)
	}
	t.Logf("%d of 1,000 granted in single tokens; %d again after returning them", granted, total)
}

// TestSyncOwedTaken checks what a reserve message's owed cost does (the
// message's value counts it, as the instance's issued total does): Redis
// takes it whatever the bucket holds, into debt, once however often the
// message is repeated, as of when it was admitted, so that a bucket full
// meanwhile pays for it out of the refill it could not hold (even when
// another instance's grant has ended its full stretch since, and the
// bucket has filled again or a grant has ended a shorter stretch after
// it: the stretch's refill pays), never twice, and a bucket that was not
// full pays all of it; a later message owing more takes only the
// difference.
func TestSyncOwedTaken(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	ctx := t.Context()
	p := redistest.Prefix(t)
	const sec = 1_000_000 // us
	now := int64(1_800_000_000_000_000)
	var seq int64
	for _, tt := range []struct {
		name                     string
		key, id                  string
		advanceUS                int64 // before the message
		again                    bool  // the previous message, repeated
		base, value, owed, ageUS int64
		total, remaining, retry  int64
	}{
		// 10 a second, burst 10.
		{"a: the whole burst granted", "a", "i0", 0, false, 0, 10, 0, 0, 10, 0, sec / 10},
		{"a: 5 admitted unasked, just now: into debt", "a", "i0", 0, false, 10, 15, 5, 0, 15, 0, 6 * sec / 10},
		{"a: the same message again: nothing more", "a", "i0", 0, true, 10, 15, 5, 0, 15, 0, 6 * sec / 10},
		{"a: 3 more owed, 2 asked for: the 3 only", "a", "i0", 0, false, 15, 20, 3, 0, 18, 0, 9 * sec / 10},
		{"a: nothing owed: nothing taken", "a", "i0", 0, false, 18, 18, 0, 0, 18, 0, 9 * sec / 10},
		// A full bucket, 12 admitted unasked over the last 3 s: taken as of
		// then, they came out of refill; 10 left now.
		{"b: owed since a full bucket's refill", "b", "i0", 0, false, 0, 12, 12, 3 * sec, 12, 10, 0},
		// 25 over the last 1 s from a full bucket: 10 + 10 refilled, 5 short.
		{"c: more than burst and refill", "c", "i0", 0, false, 0, 25, 25, sec, 25, 0, 6 * sec / 10},
		// Drained, then half a second on 4 owed since it was drained: 5
		// refilled meanwhile, 4 of them taken.
		{"d: drained", "d", "i0", 0, false, 0, 10, 0, 0, 10, 0, sec / 10},
		{"d: 4 owed since, half a second on", "d", "i0", sec / 2, false, 10, 14, 4, sec / 2, 14, 1, 0},
		// A full bucket; three instances report what their fallbacks
		// admitted over the last 2 s, the first also asking 4 now, which
		// ends the bucket's full stretch: the others' reports come out of
		// that stretch's refill, as far as it reaches.
		{"e: 6 owed over 2 s, 4 granted", "e", "i0", 0, false, 0, 10, 6, 2 * sec, 10, 6, 0},
		{"e: 6 more owed over 2 s: out of the stretch", "e", "i1", 0, false, 0, 6, 6, 2 * sec, 6, 6, 0},
		{"e: 10 more over 1 s: 8 from the stretch, 2 now", "e", "i2", 0, false, 0, 10, 10, sec, 10, 4, 0},
		// After an outage: drained, then full for 2 s while the instances
		// could not report. The first report ends the outage's stretch
		// with a grant; the bucket is full again when the second comes,
		// whose grant ends a short stretch of its own; every report's
		// cost comes out of the outage's refill, which the short stretch
		// does not push out.
		{"f: drained", "f", "i0", 0, false, 0, 10, 0, 0, 10, 0, sec / 10},
		{"f: 8 owed since it was full, 2 granted", "f", "i0", 3 * sec, false, 10, 20, 8, 2 * sec, 20, 8, 0},
		{"f: full again: 9 owed from the outage, 2 granted", "f", "i1", 3 * sec / 10, false, 0, 11, 9, 3 * sec / 2, 11, 8, 0},
		{"f: 2 owed from before the short stretch", "f", "i2", sec / 10, false, 0, 2, 2, 12 * sec / 5, 2, 9, 0},
		// A return moves the bucket's time back into the stretch its
		// grant ended: that stretch's refill pays once, not again as the
		// refill of a bucket full since then.
		{"g: drained", "g", "i0", 0, false, 0, 10, 0, 0, 10, 0, sec / 10},
		{"g: full 1 s, 2 granted", "g", "i0", 2 * sec, false, 10, 12, 0, 0, 12, 8, 0},
		{"g: 10 handed back", "g", "i0", 0, false, 12, 2, 0, 0, 2, 10, 0},
		{"g: 15 owed over 1 s: 10 from the stretch, 5 now", "g", "i1", 0, false, 0, 15, 15, sec, 15, 5, 0},
		// Five grants after an outage, each ending a short stretch, do not
		// push the outage's stretch out: the longest are kept.
		{"i: drained", "i", "i0", 0, false, 0, 10, 0, 0, 10, 0, sec / 10},
		{"i: 4 owed over 2 s, 2 granted", "i", "i0", 3 * sec, false, 10, 16, 4, 2 * sec, 16, 8, 0},
		{"i: full again, 2 granted", "i", "i0", 3 * sec / 10, false, 16, 18, 0, 0, 18, 8, 0},
		{"i: full again, 2 granted", "i", "i0", 3 * sec / 10, false, 18, 20, 0, 0, 20, 8, 0},
		{"i: full again, 2 granted", "i", "i0", 3 * sec / 10, false, 20, 22, 0, 0, 22, 8, 0},
		{"i: full again, 2 granted", "i", "i0", 3 * sec / 10, false, 22, 24, 0, 0, 24, 8, 0},
		{"i: full again, 2 granted", "i", "i0", 3 * sec / 10, false, 24, 26, 0, 0, 26, 8, 0},
		{"i: 14 owed over 3.3 s: out of the outage's stretch", "i", "i1", 3 * sec / 10, false, 0, 14, 14, 33 * sec / 10, 14, 10, 0},
		// Reports come in any order: one whose cost began later leaves
		// the refill before it to one whose cost began earlier.
		{"j: drained", "j", "i0", 0, false, 0, 10, 0, 0, 10, 0, sec / 10},
		{"j: full 3 s, 2 granted", "j", "i0", 4 * sec, false, 10, 12, 0, 0, 12, 8, 0},
		{"j: 20 owed over the last 2 s: out of its refill", "j", "i1", 0, false, 0, 20, 20, 2 * sec, 20, 8, 0},
		{"j: 10 owed over 3 s: out of the refill before", "j", "i2", 0, false, 0, 10, 10, 3 * sec, 10, 8, 0},
		// Refill a report has spent stays spent when a return moves the
		// bucket's time back over it.
		{"h: drained", "h", "i0", 0, false, 0, 10, 0, 0, 10, 0, sec / 10},
		{"h: full again, drained again", "h", "i0", sec, false, 10, 20, 0, 0, 20, 0, sec / 10},
		{"h: 10 owed over 2 s: out of the refill", "h", "i1", 3 * sec, false, 0, 10, 10, 2 * sec, 10, 10, 0},
		{"h: 20 handed back", "h", "i0", 0, false, 20, 0, 0, 0, 0, 10, 0},
		{"h: 15 owed over 2 s: 10 of the refill left, 5 now", "h", "i2", 0, false, 0, 15, 15, 2 * sec, 15, 5, 0},
	} {
		keys := []string{p + "{o}:b:" + tt.key, p + "{o}:a:" + tt.key}
		now += tt.advanceUS
		if !tt.again {
			seq++
		}
		msg := SyncMsg{Rate: 10, PeriodUS: sec, Burst: 10, Seq: seq, Epoch: 1, Base: tt.base, Value: tt.value, Budget: -1, Owed: tt.owed, AgeUS: tt.ageUS}
		rs, err := runSync(ctx, c, keys, SyncHeader{NowUS: now, LedgerTTLMS: 60_000, Mode: ModeReserve, Instance: tt.id, AllowanceLifeUS: 1_000}, msg)
		if err != nil {
			t.Fatal(err)
		}
		if r := rs[0]; r.Total != tt.total || r.Remaining != tt.remaining || r.RetryUS != tt.retry {
			t.Errorf("%s: total %d, remaining %d, retry %dus; want %d, %d, %dus", tt.name, r.Total, r.Remaining, r.RetryUS, tt.total, tt.remaining, tt.retry)
		}
	}
	redistest.CheckTTLs(t, c, p)
}

// TestSyncLimitChangeKeepsTokens checks what a key's bucket does when the
// messages about it bring another limit: it keeps the tokens it holds,
// cut to the new burst, and refills at the new rate from then on; a
// raised limit unblocks a drained key within one refill of the new limit,
// a lowered one clamps at once, and a full bucket stays full.
func TestSyncLimitChangeKeepsTokens(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	ctx := t.Context()
	p := redistest.Prefix(t)
	keys := []string{p + "{c}:b", p + "{c}:a"}
	const sec = 1_000_000 // us
	now := int64(1_800_000_000_000_000)
	var seq, total int64
	send := func(rate, periodUS, burst, value int64) (remaining, retry int64) {
		t.Helper()
		seq++
		msg := SyncMsg{Rate: rate, PeriodUS: periodUS, Burst: burst, Seq: seq, Epoch: 1, Base: total, Value: value, Budget: -1}
		r, err := runSync(ctx, c, keys, SyncHeader{NowUS: now, LedgerTTLMS: 60_000, Mode: ModeReserve, Instance: "i0", AllowanceLifeUS: 1_000}, msg)
		if err != nil {
			t.Fatal(err)
		}
		total = r[0].Total
		return r[0].Remaining, r[0].RetryUS
	}
	// 10 an hour, drained: a token every 6 minutes.
	if left, retry := send(10, 3600*sec, 10, 10); left != 0 || retry != 360*sec {
		t.Fatalf("drained 10/h: left %d, retry %dus", left, retry)
	}
	now += 180 * sec // half a token refilled
	// Raised to 1000 a second: the half token kept, then 1000 a second.
	if left, retry := send(1000, sec, 1000, total); left != 0 || retry != 500 {
		t.Errorf("raised to 1000/s: left %d, retry %dus; want 0 and 500us (the half token kept)", left, retry)
	}
	now += 10_500 // 10.5 more tokens at the new rate
	if left, _ := send(1000, sec, 1000, total); left != 11 {
		t.Errorf("10.5 ms later at 1000/s: left %d, want 11", left)
	}
	now += 2 * sec // full again
	if left, _ := send(1000, sec, 1000, total); left != 1000 {
		t.Errorf("2 s later: left %d, want the new burst 1000", left)
	}
	// Take 400, then lower to 100 a second, burst 100: 600 held, cut to 100.
	send(1000, sec, 1000, total+400)
	if left, _ := send(100, sec, 100, total); left != 100 {
		t.Errorf("lowered to a burst of 100 holding 600: left %d, want 100", left)
	}
	// Drain it, raise the burst back: nothing more than what it held.
	send(100, sec, 100, total+100)
	if left, retry := send(1000, sec, 1000, total); left != 0 || retry != 1000 {
		t.Errorf("drained, raised to 1000/s: left %d, retry %dus; want 0 and 1000us", left, retry)
	}
	redistest.CheckTTLs(t, c, p)
}

// TestSyncTopUpRewritesOneStretch tops up a full bucket three times: the
// first two top-ups record a stretch each (f, then g), and the third, a
// ledger TTL later, drops f's stretch, which ended that long ago, and
// records its own. The stretch it keeps stays in g, byte for byte, and the
// new one takes f, so the top-up rewrites one field, not both.
func TestSyncTopUpRewritesOneStretch(t *testing.T) {
	c := redistest.Standalone(t)
	ctx := t.Context()
	p := redistest.Prefix(t)
	keys := []string{p + "{s}:b", p + "{s}:a"}
	const ledgerTTL = 10_000 // ms
	now := int64(1_800_000_000_000_000)
	seq := int64(1_000)
	topUp := func(value int64) {
		t.Helper()
		seq++
		// 10 tokens a second: full again 100 ms after a top-up of one.
		msg := SyncMsg{Rate: 10, PeriodUS: 1_000_000, Burst: 10, Seq: seq, Epoch: 1, Base: value - 1, Value: value, Budget: -1}
		if _, err := runSync(ctx, c, keys, SyncHeader{NowUS: now, LedgerTTLMS: ledgerTTL, Mode: ModeReserve, Instance: "i", AllowanceLifeUS: 1_000}, msg); err != nil {
			t.Fatal(err)
		}
	}
	fields := func() (f, g string) {
		t.Helper()
		v := c.HMGet(ctx, keys[0], "f", "g").Val()
		f, _ = v[0].(string)
		g, _ = v[1].(string)
		return f, g
	}
	topUp(1)
	now += 2_000_000
	topUp(2)
	_, g := fields()
	if want := fmt.Sprintf("%d %d", now-1_900_000, now); g != want {
		t.Fatalf("g after the second top-up = %q, want %q", g, want)
	}
	now += (ledgerTTL + 1_000) * 1_000
	from := now - (ledgerTTL+1_000)*1_000 + 100_000
	topUp(3)
	f2, g2 := fields()
	if g2 != g {
		t.Errorf("g after the third top-up = %q, want %q as it was: its stretch is kept", g2, g)
	}
	if want := fmt.Sprintf("%d %d", from, now); f2 != want {
		t.Errorf("f after the third top-up = %q, want the new stretch %q", f2, want)
	}
}
