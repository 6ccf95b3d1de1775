package scripts

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// BenchmarkSyncScript measures one call of the sync script carrying 256
// reserve messages that each top up a key, over a keyspace of about 100,000
// keys: the unit a round of the hybrid limiter is made of
// (message/keys=256).
// redis-us/key is the time Redis spent in the script per key message
// (INFO commandstats) and redis-cpu-us/key its main thread's CPU, which
// the client's share of the op (encoding, decoding) does not include. The
// same with one message a call (keys=1) adds to that the fixed cost of a
// call, which a node pays for every call whatever it carries.
//
// floor is what no script for these messages can go below: syncFloor,
// which makes only the two calls a message needs, HMGET of the fields
// sync.lua reads and HSET of the two it writes at every message, on the
// same keys, with the same ARGV and a reply of the same size, and neither
// parses nor formats a number. message over floor is what the script's
// own work costs per message. wire (syncWire) is the floor plus reading
// and writing the formats a message meets: wire over floor is their cost,
// message over wire the script's logic. paired (benchSyncPaired) gives the
// ratios from these run in turn, each on its own server, which a busy
// spell of the machine cannot favour one of, with stretchless
// (syncStretchless) beside them: message over stretchless is what the
// stretches a top-up of a full bucket records cost, the largest part of
// that logic.
func BenchmarkSyncScript(b *testing.B) {
	for _, bench := range []struct {
		name   string
		script *Script
	}{{"message", Sync}, {"floor", syncFloor}, {"wire", syncWire}} {
		for _, perCall := range []int{1, 256} {
			b.Run(bench.name+"/keys="+strconv.Itoa(perCall), func(b *testing.B) { benchSyncScript(b, bench.script, perCall) })
		}
	}
	b.Run("paired/keys=256", func(b *testing.B) { benchSyncPaired(b, 256) })
}

// syncFloor is BenchmarkSyncScript's floor: sync.lua's calls for a reserve
// message and nothing else. It writes the ledger field and the bucket's
// time as values of the lengths sync.lua's are (four packed doubles, a
// %.17g number), and replies nine zeros a message.
var syncFloor = NewScript("sync_floor", `
local lfield = 'lb:' .. ARGV[4]
local reply = {}
for i = 1, (#ARGV - 6) / 2 do
  local bkey = ARGV[2 * i + 5]
  redis.call('HMGET', bkey, 't', lfield, 'x', 'f', 'L', 'z', 'g')
  redis.call('HSET', bkey, lfield, '0123456789abcdef0123456789abcdef', 't', '1700000000123456.5')
  local r = 9 * (i - 1)
  for f = 1, 9 do reply[r + f] = 0 end
end
return reply`)

// syncWire is syncFloor plus the formats sync.lua reads and writes at a
// reserve message: it unpacks the message and the ledger, reads the
// bucket's time and its first stretch field as text, packs the new ledger
// and formats the time and a stretch field as %.17g text, which is all a
// top-up of a full bucket formats (sync.lua's take records a stretch). It
// writes what the floor writes, so that wire over floor is the formats
// alone.
var syncWire = NewScript("sync_wire", `
local lfield = 'lb:' .. ARGV[4]
local reply = {}
for i = 1, (#ARGV - 6) / 2 do
  local bkey, msg = ARGV[2 * i + 5], ARGV[2 * i + 6]
  local rate, period, _, seq, epoch, _, value = struct.unpack('<ddddddddddd', msg)
  local got = redis.call('HMGET', bkey, 't', lfield, 'x', 'f', 'L', 'z', 'g')
  local tat = tonumber(got[1]) or 0
  if got[2] then struct.unpack('<ddd', got[2]) end
  local s = tonumber(string.match(got[4] or '0', '^(%S+)')) or 0
  local ledger = struct.pack('<dddd', seq, epoch, value, 1700000000)
  local stretch = string.format('%.17g %.17g', s, tat)
  redis.call('HSET', bkey, lfield, ledger, 't', string.format('%.17g', tat + period / rate))
  local r = 9 * (i - 1)
  for f = 1, 9 do reply[r + f] = 0 end
end
return reply`)

// syncStretchless is sync.lua without the stretch that a top-up of a full
// bucket records (take's call of record), which late reports are charged
// out of: such a message neither reads, chooses among, formats nor writes
// stretches, and does the rest of what sync.lua does.
func syncStretchless(tb testing.TB) *Script {
	const record = "    record(since_full(), now)\n"
	src := Sync.Source()
	if strings.Count(src, record) != 1 {
		tb.Fatalf("sync.lua has %d lines %q, want one", strings.Count(src, record), record)
	}
	return NewScript("sync_stretchless", strings.Replace(src, record, "", 1))
}

func benchSyncScript(b *testing.B, script *Script, perCall int) {
	// A server of its own: on one server shared by the runs, the keys the
	// earlier runs left (100,000 more each) made each run read dearer
	// than the last (12.0, 14.5, 19.6 us a message in three).
	c := redistest.Start(b).Client(b)
	load := newSyncLoad(b, c, script, perCall, syncKeyspace, redistest.Prefix(b))
	before, cpuBefore := evalUsec(b, c), redisCPU(b, c)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		load.call()
	}
	b.StopTimer()
	b.ReportMetric(float64(evalUsec(b, c)-before)/float64(b.N*perCall), "redis-us/key")
	b.ReportMetric((redisCPU(b, c)-cpuBefore)*1e6/float64(b.N*perCall), "redis-cpu-us/key")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N*perCall), "us/key")
}

// benchSyncPaired runs the message, stretchless, wire and floor scripts in
// turn, a call of each an iteration, each on a server of its own, and
// reports the Redis CPU of each of the first three over the floor's, and
// the floor's:
// run one after another, a script whose runs meet a busy spell of the
// machine reads dearer than one that does not, and the ratios with it (a
// floor read 5.2 us a message in one run, 3.2 in the next). Servers of
// their own, not one: on one, the garbage the message script leaves is
// collected in the others' calls too (a floor in turn with it read 4.3).
func benchSyncPaired(b *testing.B, perCall int) {
	scripts := []*Script{Sync, syncStretchless(b), syncWire, syncFloor}
	loads := make([]*syncLoad, len(scripts))
	cpu := make([]float64, len(scripts))
	for i, s := range scripts {
		c := redistest.Start(b).Client(b)
		loads[i] = newSyncLoad(b, c, s, perCall, syncKeyspace, redistest.Prefix(b))
	}
	for i, l := range loads {
		cpu[i] = -redisCPU(b, l.c)
	}
	b.ResetTimer()
	for range b.N {
		for _, l := range loads {
			l.call()
		}
	}
	b.StopTimer()
	for i, l := range loads {
		cpu[i] += redisCPU(b, l.c)
	}
	message, stretchless, wire, floor := cpu[0], cpu[1], cpu[2], cpu[3]
	if floor <= 0 {
		b.Fatalf("the floor read %v s of CPU", floor)
	}
	b.ReportMetric(floor*1e6/float64(b.N*perCall), "floor-cpu-us/key")
	b.ReportMetric(message/floor, "x-floor")
	b.ReportMetric(wire/floor, "wire-x-floor")
	b.ReportMetric(stretchless/floor, "stretchless-x-floor")
}

// syncKeyspace is the keys of each of BenchmarkSyncScript's servers: about
// 100,000, a multiple of 256.
const syncKeyspace = 391 * 256

// syncLoad sends a script calls of perCall reserve messages, each topping
// up a key by 6 tokens of 1,000 a second, over a keyspace visited in turn,
// a second of the script's clock apart: each message finds its bucket
// full, as a key of the long tail does.
type syncLoad struct {
	tb      testing.TB
	c       *redis.Client
	script  *Script
	perCall int
	keys    []string // each key's bucket
	totals  []int64
	seq     int64
	now     int64
	next    int
	buf     []byte
	args    []any
	replies []SyncReply
	ends    []int
}

// syncLoadEpoch is the epoch of every message a syncLoad sends, and its
// first sequence number.
const syncLoadEpoch = 1_000

// newSyncLoad loads script on c and sends it a call for each of keyspace
// keys once, so that the calls measured find the keys and their ledgers
// written. keyspace is a multiple of perCall.
func newSyncLoad(tb testing.TB, c *redis.Client, script *Script, perCall, keyspace int, prefix string) *syncLoad {
	l := &syncLoad{tb: tb, c: c, script: script, perCall: perCall,
		keys: make([]string, keyspace), totals: make([]int64, keyspace),
		seq: syncLoadEpoch, now: 1_700_000_000_000_000,
		args:    make([]any, SyncHeaderArgs+ModeReserve.KeyArgs()*perCall),
		replies: make([]SyncReply, perCall), ends: make([]int, perCall)}
	for i := range keyspace {
		l.keys[i] = prefix + "{s}:b:" + strconv.Itoa(i)
	}
	if err := c.ScriptLoad(tb.Context(), script.Source()).Err(); err != nil {
		tb.Fatal(err)
	}
	for range keyspace / perCall {
		l.call()
	}
	return l
}

// call sends one call of perCall messages.
func (l *syncLoad) call() {
	h := SyncHeader{NowUS: l.now, LedgerTTLMS: 60_000, Mode: ModeReserve, Instance: "i", AllowanceLifeUS: 1_000_000}.Args()
	copy(l.args, h[:])
	from := l.next
	l.buf = l.buf[:0]
	for j := range l.perCall {
		l.seq++
		m := SyncMsg{Rate: 1000, PeriodUS: 1_000_000, Burst: 1000, Seq: l.seq, Epoch: syncLoadEpoch,
			Base: l.totals[l.next], Value: l.totals[l.next] + 6, Budget: -1}
		l.buf = m.Append(l.buf)
		l.ends[j] = len(l.buf)
		l.next = (l.next + 1) % len(l.keys)
	}
	all := string(l.buf)
	start := 0
	per := ModeReserve.KeyArgs()
	for j, end := range l.ends {
		a := l.args[SyncHeaderArgs+per*j:]
		a[0], a[1] = &l.keys[from+j], all[start:end]
		start = end
	}
	reply, err := l.script.EvalShaInts(l.tb.Context(), l.c, l.keys[from:from+1], l.args).Result()
	if err != nil {
		l.tb.Fatal(err)
	}
	if err := ParseSyncReplies(reply, l.replies); err != nil {
		l.tb.Fatal(err)
	}
	for j, r := range l.replies {
		l.totals[from+j] = r.Total
	}
	if l.next == 0 {
		l.now += 1_000_000
	}
}

// redisCPU returns the CPU seconds Redis's main thread has used: unlike
// commandstats, not inflated when other processes take the CPU.
func redisCPU(b *testing.B, c interface {
	Info(ctx context.Context, section ...string) *redis.StringCmd
}) float64 {
	info, err := c.Info(b.Context(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread" {
			x, _ := strconv.ParseFloat(v, 64)
			sum += x
		}
	}
	return sum
}

// evalUsec returns the microseconds Redis spent in EVAL and EVALSHA.
func evalUsec(b *testing.B, c interface {
	Info(ctx context.Context, section ...string) *redis.StringCmd
}) int64 {
	info, err := c.Info(b.Context(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_eval") {
			continue
		}
		_, rest, _ := strings.Cut(line, "usec=")
		rest, _, _ = strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(rest, 10, 64)
		sum += n
	}
	return sum
}
