package scripts

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// The model below states the reserve mode of sync.lua from its definition,
// as a token bucket rather than the script's theoretical arrival time: a
// bucket level, exact as a rational, refilling continuously at one token
// per interval up to the burst (a missing bucket is full); per key and
// instance a ledger that applies a message only if its sequence number is
// above the last applied one, and takes the instance's word (base) for the
// total when the ledger is missing or of another epoch. A message first
// raises the total to base + owed whatever the bucket holds, into debt if
// need be, taking the difference as of age ago: out of the refill the
// bucket could not hold since, of the full stretches it keeps (see owe),
// the rest now; then one asking for more than the total is granted what
// whole tokens the bucket holds, and one asking for less hands the
// difference back. FuzzSyncScript plays random sequences of messages,
// duplicated, held back and reordered, batched or alone, with instance
// restarts, against both and requires identical replies.
//
// Intervals are whole microseconds and the clock moves in steps that are
// multiples of syncGrid, so the script's floats are exact and its 1e-6
// tolerance never matters; the rounding of fractional intervals is left to
// the integration tests. syncGrid also keeps every bucket TTL the script
// sets (its state's life on the caller's clock) at half a second or more of
// real time, far longer than a sequence runs, so Redis never expires a key
// the model still holds.

const syncGrid = 500_000 // us

type syncLedger struct{ seq, epoch, total int64 }

type syncBucket struct {
	rate, periodUS, burst int64
	// tat is when the bucket holds its burst again (us, exact): not ahead
	// of now, since when it has been full; nil while never written, full
	// since ever. f: the full stretches whose refill no charge has used,
	// start and end in turn, in time order, at most keepStretches; e: the
	// end of the last one recorded or used, or nil.
	tat, e  *big.Rat
	f       []*big.Rat
	ledgers map[string]syncLedger
}

// keepStretches is how many stretches a bucket keeps: when there are
// more, the earliest goes if it ended syncLedgerTTL ago, else the shortest.
const (
	keepStretches = 2
	syncLedgerTTL = 60_000_000 // us: the LedgerTTLMS the fuzz sends
)

func (b *syncBucket) interval() *big.Rat { return new(big.Rat).SetFrac64(b.periodUS, b.rate) }

// at returns tat, 0 for a bucket never written.
func (b *syncBucket) at() *big.Rat {
	if b.tat == nil {
		return rat(0)
	}
	return b.tat
}

func (b *syncBucket) ahead(now int64) *big.Rat { return maxRat(b.at(), rat(now)) }

// tokens returns the bucket's level at now: the burst less what its time
// ahead of now is worth, negative in debt.
func (b *syncBucket) tokens(now int64) *big.Rat {
	owed := new(big.Rat).Quo(new(big.Rat).Sub(b.ahead(now), rat(now)), b.interval())
	return new(big.Rat).Sub(rat(b.burst), owed)
}

// plus returns t + n intervals.
func (b *syncBucket) plus(t *big.Rat, n int64) *big.Rat {
	return new(big.Rat).Add(t, new(big.Rat).Mul(rat(n), b.interval()))
}

func maxRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

// full returns since when a bucket full now holds refill that no stretch
// records and no charge has used: its time, or e if later.
func (b *syncBucket) full() *big.Rat {
	if b.e != nil {
		return maxRat(b.at(), b.e)
	}
	return b.at()
}

// trim drops stretches while there are more than keepStretches: the
// earliest if it ended syncLedgerTTL before now, else the shortest (of
// equals, the earlier).
func (b *syncBucket) trim(now int64) {
	for len(b.f) > 2*keepStretches {
		drop := 0
		if b.f[1].Cmp(rat(now-syncLedgerTTL)) >= 0 {
			for k := 2; k < len(b.f); k += 2 {
				if new(big.Rat).Sub(b.f[k+1], b.f[k]).Cmp(new(big.Rat).Sub(b.f[drop+1], b.f[drop])) < 0 {
					drop = k
				}
			}
		}
		b.f = append(b.f[:drop], b.f[drop+2:]...)
	}
}

// record adds the stretch from s to g and moves e to its end.
func (b *syncBucket) record(now int64, s, g *big.Rat) {
	if b.e == nil || g.Cmp(b.e) > 0 {
		b.e = g
	}
	if g.Cmp(s) > 0 {
		b.f = append(b.f, s, g)
		b.trim(now)
	}
}

// take charges n tokens at now, recording the full stretch it ends.
func (b *syncBucket) take(now, n int64) {
	if n <= 0 {
		return
	}
	if b.at().Cmp(rat(now)) <= 0 {
		b.record(now, b.full(), rat(now))
	}
	b.tat = b.plus(b.ahead(now), n)
}

// owe charges n tokens admitted since since as if all at since: out of the
// refill of the recorded stretches after since, the earliest first (a
// stretch's part before since stays); then,
// for a bucket full now, out of the refill it could not hold since (what
// it held before since is recorded); the rest is taken now.
func (b *syncBucket) owe(now, since, n int64) {
	s := rat(since)
	d := new(big.Rat).Mul(rat(n), b.interval())
	for k := 0; d.Sign() > 0 && k < len(b.f); {
		if s.Cmp(b.f[k+1]) >= 0 {
			k += 2
			continue
		}
		if s.Cmp(b.f[k]) > 0 { // the part before since stays
			b.f = slices.Insert(b.f, k+1, s, s)
			k += 2
		}
		t := new(big.Rat).Add(b.f[k], d)
		if t.Cmp(b.f[k+1]) < 0 {
			b.f[k], d = t, new(big.Rat)
		} else {
			d = new(big.Rat).Sub(t, b.f[k+1])
			b.f = append(b.f[:k], b.f[k+2:]...)
		}
	}
	b.trim(now)
	if d.Sign() <= 0 {
		return
	}
	if b.at().Cmp(rat(now)) <= 0 {
		full := b.full()
		from := maxRat(full, s)
		b.record(now, full, from)
		b.tat = new(big.Rat).Add(from, d)
		// The refill spent: a return that moves the time back does not
		// free it again.
		if t := rat(now); b.tat.Cmp(t) < 0 {
			b.e = maxRat(b.e, b.tat)
		} else {
			b.e = maxRat(b.e, t)
		}
	} else {
		b.tat = new(big.Rat).Add(b.tat, d)
	}
}

func rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

func ceilRat(r *big.Rat) int64 {
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if r.Sign() > 0 && !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func floorRat(r *big.Rat) int64 {
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if r.Sign() < 0 && !r.IsInt() {
		q.Sub(q, big.NewInt(1))
	}
	return q.Int64()
}

// syncMsg is one reserve message of one instance about one key.
type syncMsg struct {
	key                                  int
	id                                   string
	seq, epoch, base, value, owed, ageUS int64
}

// apply runs one message at now and returns the reply the script must give:
// total, remaining, retry_us, reset_us, allowance.
func (b *syncBucket) apply(now int64, m syncMsg) [5]int64 {
	l, ok := b.ledgers[m.id]
	total := m.base
	if ok && l.epoch == m.epoch {
		total = l.total
	}
	if !ok || m.seq > l.seq {
		if m.base+m.owed > total { // admitted without a grant: taken, into debt
			b.owe(now, now-m.ageUS, m.base+m.owed-total)
			total = m.base + m.owed
		}
		switch {
		case m.value < total: // hand back
			b.tat = b.plus(b.ahead(now), -(total - m.value))
			total = m.value
		case m.value > total: // whole tokens, as many as there are
			grant := min(m.value-total, max(floorRat(b.tokens(now)), 0))
			b.take(now, grant)
			total += grant
		}
		if b.tat != nil && b.tat.Sign() <= 0 {
			b.tat = nil // at 0, as never written
		}
		b.ledgers[m.id] = syncLedger{m.seq, m.epoch, total}
	}
	level := b.tokens(now)
	remaining := max(floorRat(level), 0)
	var retry int64
	if remaining < 1 {
		retry = ceilRat(new(big.Rat).Mul(new(big.Rat).Sub(rat(1), level), b.interval()))
	}
	reset := ceilRat(new(big.Rat).Mul(new(big.Rat).Sub(rat(b.burst), level), b.interval()))
	return [5]int64{total, remaining, retry, reset, 0}
}

// syncInstance is what an instance knows: its next sequence number, and
// per key its epoch and the total Redis last acknowledged.
type syncInstance struct {
	id    string
	epoch [2]int64
	acked [2]int64
	seq   *int64
}

// compose returns the instance's next message about key: a total delta
// away from the acknowledged one, and owed tokens admitted without a grant
// since ageUS ago.
func (in *syncInstance) compose(key int, delta, owed, ageUS int64) syncMsg {
	*in.seq++
	if in.epoch[key] == 0 {
		in.epoch[key] = *in.seq
		*in.seq++
	}
	return syncMsg{key: key, id: in.id, seq: *in.seq, epoch: in.epoch[key], base: in.acked[key],
		value: max(in.acked[key]+delta, 0), owed: owed, ageUS: ageUS}
}

// syncLimits have whole-microsecond intervals that are multiples of syncGrid.
var syncLimits = [][2][3]int64{ // per key: rate, period (us), burst
	{{10, 10_000_000, 10}, {2, 1_000_000, 3}},
	{{1, 500_000, 1}, {4, 8_000_000, 40}},
	{{6, 60_000_000, 6}, {1, 1_000_000, 5}},
}

func FuzzSyncScript(f *testing.F) {
	// A partial grant, a refill, then the same message again: applied
	// twice it would be granted what refilled.
	f.Add(uint8(0), []byte{1, 26, 1, 26, 0, 2, 4, 1})
	// Tokens admitted without a grant, reported, and the report repeated:
	// taken once, into debt.
	f.Add(uint8(0), []byte{1, 0x50, 7, 0x15, 4, 0, 0, 1, 1, 0x2d})
	// An older message arriving after a newer one that returned tokens.
	f.Add(uint8(0), []byte{2, 26, 1, 22, 3, 0, 0, 1, 1, 26})
	f.Add(uint8(0), []byte{1, 0x21, 1, 0x25, 0, 2, 1, 0x1d, 4, 0, 1, 0x03, 6, 0, 1, 0x31})
	f.Add(uint8(1), []byte{2, 0x31, 2, 0x15, 3, 1, 3, 0, 4, 1, 5, 0, 0, 4, 1, 0x09})
	f.Add(uint8(2), []byte{2, 0x40, 2, 0x41, 2, 0x42, 5, 0, 4, 2, 4, 0, 0, 3, 2, 0x07, 3, 0})
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 6 {
		ops := make([]byte, 60)
		for j := range ops {
			ops[j] = byte(rng.IntN(256))
		}
		f.Add(uint8(i), ops)
	}
	c := redistest.Standalone(f)
	f.Fuzz(func(t *testing.T, limits uint8, ops []byte) {
		if len(ops) > 400 {
			return // long inputs only slow the fuzzer down
		}
		ctx := context.Background()
		// Prefix's 24 random bits collide within a minute of fuzzing, and
		// the ledgers of a colliding input live for a minute: 64 more.
		prefix := fmt.Sprintf("%s%x:", redistest.Prefix(t), rand.Uint64())
		lim := syncLimits[int(limits)%len(syncLimits)]
		var buckets [2]*syncBucket
		var keys [2][2]string
		for k := range buckets {
			buckets[k] = &syncBucket{rate: lim[k][0], periodUS: lim[k][1], burst: lim[k][2], ledgers: map[string]syncLedger{}}
		}
		keysOf := func(key int) []string {
			return []string{fmt.Sprintf("%s{s}:b:k%d", prefix, key), fmt.Sprintf("%s{s}:a:k%d", prefix, key)}
		}
		for k := range keys {
			copy(keys[k][:], keysOf(k))
		}
		seq := int64(1_000)
		instances := [2]*syncInstance{{id: "a", seq: &seq}, {id: "b", seq: &seq}}
		now := int64(1_700_000_000_000_000) // a multiple of syncGrid
		var held, sent []syncMsg
		call := func(i int, msgs ...syncMsg) {
			t.Helper()
			if len(msgs) == 0 {
				return
			}
			var ks []string
			var sms []SyncMsg
			for _, m := range msgs {
				b := buckets[m.key]
				ks = append(ks, keysOf(m.key)...)
				sms = append(sms, SyncMsg{Rate: b.rate, PeriodUS: b.periodUS, Burst: b.burst,
					Seq: m.seq, Epoch: m.epoch, Base: m.base, Value: m.value, Budget: -1, Owed: m.owed, AgeUS: m.ageUS})
			}
			got, err := runSync(ctx, c, ks, SyncHeader{NowUS: now, LedgerTTLMS: 60_000, Mode: ModeReserve, Instance: msgs[0].id, AllowanceLifeUS: 1_000}, sms...)
			if err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
			for j, m := range msgs {
				lseq := buckets[m.key].ledgers[m.id].seq
				want := buckets[m.key].apply(now, m)
				r := got[j]
				g := [5]int64{r.Total, r.Remaining, r.RetryUS, r.ResetUS, r.Allowance}
				if r.Moved() || r.Reset {
					t.Fatalf("op %d: an open bucket replied moved to %d.%d, or reset (%v)", i, r.Shards, r.Generation, r.Reset)
				}
				if r.LedgerSeq != lseq {
					t.Fatalf("op %d: reply names the ledger's seq %d, model %d", i, r.LedgerSeq, lseq)
				}
				if g != want {
					t.Fatalf("op %d at +%dus, message %+v: script %v, model %v", i, now-1_700_000_000_000_000, m, g, want)
				}
				for _, in := range instances {
					if in.id == m.id && in.epoch[m.key] == m.epoch {
						in.acked[m.key] = g[0]
					}
				}
				sent = append(sent, m)
			}
		}
		for i := 0; i+1 < len(ops); i += 2 {
			kind, arg := ops[i]%8, ops[i+1]
			in := instances[arg&1]
			key := int(arg>>1) & 1
			delta := func() int64 {
				b := buckets[key].burst
				return int64(arg>>2)%(2*b+1) - b
			}
			switch kind {
			case 0: // the clock moves
				now += int64(arg%5) * syncGrid
			case 1: // a message, delivered at once
				call(i, in.compose(key, delta(), 0, 0))
			case 2: // a message held back
				held = append(held, in.compose(key, delta(), 0, 0))
			case 3: // a held message arrives, out of order
				if len(held) > 0 {
					j := int(arg) % len(held)
					m := held[j]
					held = append(held[:j], held[j+1:]...)
					call(i, m)
				}
			case 4: // a message delivered before arrives again
				if len(sent) > 0 {
					call(i, sent[int(arg)%len(sent)])
				}
			case 5: // the held messages of one instance, batched in one call
				var batch, rest []syncMsg
				for _, m := range held {
					if m.id == in.id && len(batch) < 4 {
						batch = append(batch, m)
					} else {
						rest = append(rest, m)
					}
				}
				held = rest
				call(i, batch...)
			case 6: // the instance restarts: new epochs, nothing acknowledged
				in.epoch, in.acked = [2]int64{}, [2]int64{}
			case 7: // tokens admitted while Redis could not be asked, reported
				owed := int64(arg>>2) % (2*buckets[key].burst + 1)
				age := int64(arg>>4) % 6 * syncGrid
				call(i, in.compose(key, delta(), owed, age))
			}
		}
		noTTL, _ := redistest.KeysWithoutTTL(t, c, prefix)
		if len(noTTL) > 0 {
			t.Errorf("keys without TTL: %v", noTTL)
		}
		for k, b := range buckets {
			if b.tokens(now).Cmp(rat(b.burst)) < 0 {
				if n, err := c.Exists(ctx, keys[k][0]).Result(); err != nil || n != 1 {
					t.Errorf("bucket %d holds %v of %d tokens, but its key is gone (%v)", k, b.tokens(now), b.burst, err)
				}
			}
		}
	})
}
