package scripts

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestSyncSameOnEveryInterpreter sends the same random messages to sync.lua
// on Redis and on miniredis, whose Lua is Go's (the simulator's), in
// lockstep: every reply and every hash the script keeps must be the same,
// byte for byte. The messages are what instances send: three instances
// (two in reserve mode, one optimistic, with and without a budget) on
// four keys under limits that sometimes change, grants and hand-backs,
// owed costs of every age, new epochs, bases below the total, and a
// clock that stands still, steps, or jumps past the ledgers' lifetime.
// Go's Lua is not Redis's: an assignment `x = up and y`, with up an
// upvalue that is false, leaves x as it was there.
func TestSyncSameOnEveryInterpreter(t *testing.T) {
	in := interpreters(t)
	for seed := range uint64(2) {
		syncLockstep(t, seed, 250, in)
	}
}

// syncLockstep sends steps random calls of sync.lua, made from seed, to
// each interpreter with the same arguments, and fails at the first reply
// or hash that differs between them.
func syncLockstep(t *testing.T, seed uint64, steps int, targets []interpreter) {
	t.Helper()
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(seed, 7))
	prefix := fmt.Sprintf("%sseed%d:", redistest.Prefix(t), seed)
	const keyCount = 4
	buckets := make([]string, keyCount)
	allowances := make([]string, keyCount)
	for k := range keyCount {
		buckets[k] = fmt.Sprintf("%s{s}:b%d", prefix, k)
		allowances[k] = fmt.Sprintf("%s{s}:a%d", prefix, k)
	}
	limits := [][3]int64{{10, 1_000_000, 10}, {1_000, 1_000_000, 1_000}, {3, 7_000_000, 5}, {100, 60_000_000, 1}}
	limitOf := make([]int, keyCount)
	for k := range limitOf {
		limitOf[k] = rng.IntN(len(limits))
	}
	type view struct{ epoch, total int64 }
	type instance struct {
		id   string
		mode SyncMode
		seq  int64
		keys [keyCount]view
	}
	insts := []*instance{{id: "a", mode: ModeReserve}, {id: "b", mode: ModeReserve}, {id: "c", mode: ModeOptimistic}}
	for _, in := range insts {
		in.seq = 1_000
		for k := range in.keys {
			in.keys[k].epoch = in.seq
		}
	}
	now := int64(1_800_000_000_000_000)
	for step := range steps {
		switch r := rng.IntN(10); {
		case r < 2: // the same microsecond
		case r < 6:
			now += rng.Int64N(1_000)
		case r < 9:
			now += rng.Int64N(2_000_000)
		default:
			now += rng.Int64N(90_000_000) // past a ledger's minute at times
		}
		if rng.IntN(20) == 0 {
			limitOf[rng.IntN(keyCount)] = rng.IntN(len(limits))
		}
		in := insts[rng.IntN(len(insts))]
		// Redis expires keys on its own clock: an allowance lives a minute,
		// past any run of this test, so no key expires in Redis and not in
		// miniredis, and an allowance still lapses on the calls' clock,
		// which moves about five seconds a step.
		h := SyncHeader{NowUS: now, LedgerTTLMS: 60_000, Mode: in.mode, Instance: in.id, AllowanceLifeUS: 60_000_000}
		var sk []SyncKey
		for _, k := range rng.Perm(keyCount)[:1+rng.IntN(3)] {
			v := &in.keys[k]
			in.seq++
			if rng.IntN(25) == 0 {
				v.epoch, v.total = in.seq, 0
			}
			lim := limits[limitOf[k]]
			m := SyncMsg{Rate: lim[0], PeriodUS: lim[1], Burst: lim[2], Seq: in.seq, Epoch: v.epoch, Base: v.total, Budget: -1}
			if m.Base > 0 && rng.IntN(8) == 0 {
				m.Base -= rng.Int64N(m.Base + 1)
			}
			m.Value = m.Base + rng.Int64N(20)
			if in.mode == ModeReserve && rng.IntN(4) == 0 {
				m.Value = max(0, m.Base-rng.Int64N(4))
			}
			if in.mode == ModeOptimistic {
				if rng.IntN(2) == 0 {
					m.Budget = rng.Int64N(10)
				}
				m.Held = rng.Int64N(5)
				if rng.IntN(20) == 0 {
					m.Held = -1
				}
			}
			if rng.IntN(8) == 0 {
				m.Owed = 1 + rng.Int64N(5)
				m.AgeUS = rng.Int64N(5_000_000)
				if in.mode == ModeOptimistic {
					m.Value += m.Owed
				}
			}
			sk = append(sk, SyncKey{Bucket: buckets[k], Allowances: allowances[k], Msg: m})
		}
		route, args := SyncCall(h, sk...)
		var first []any
		var firstHashes []map[string]string
		for i, tg := range targets {
			reply, err := Sync.Run(ctx, tg.c, route, args...)
			if err != nil {
				t.Fatalf("seed %d step %d: %s: %v", seed, step, tg.name, err)
			}
			var hashes []map[string]string
			for k := range keyCount {
				for _, key := range []string{buckets[k], allowances[k]} {
					h, err := tg.c.HGetAll(ctx, key).Result()
					if err != nil {
						t.Fatal(err)
					}
					hashes = append(hashes, h)
				}
			}
			if i == 0 {
				first, firstHashes = reply.([]any), hashes
				continue
			}
			if fmt.Sprint(reply) != fmt.Sprint(first) {
				t.Fatalf("seed %d step %d: %s replied %v, %s %v", seed, step, targets[0].name, first, tg.name, reply)
			}
			for j := range hashes {
				if !maps.Equal(hashes[j], firstHashes[j]) {
					t.Fatalf("seed %d step %d: hash %d: %s holds %q, %s %q", seed, step, j, targets[0].name, firstHashes[j], tg.name, hashes[j])
				}
			}
		}
		replies := make([]SyncReply, len(sk))
		if err := ParseSyncReplies(first, replies); err != nil {
			t.Fatal(err)
		}
		for j, s := range sk {
			k := int(s.Bucket[len(s.Bucket)-1] - '0')
			if replies[j].LedgerSeq <= s.Msg.Seq {
				in.keys[k].total = replies[j].Total
			}
		}
	}
}
