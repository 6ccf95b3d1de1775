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
// message over wire the script's logic.
func BenchmarkSyncScript(b *testing.B) {
	for _, bench := range []struct {
		name   string
		script *Script
	}{{"message", Sync}, {"floor", syncFloor}, {"wire", syncWire}} {
		for _, perCall := range []int{1, 256} {
			b.Run(bench.name+"/keys="+strconv.Itoa(perCall), func(b *testing.B) { benchSyncScript(b, bench.script, perCall) })
		}
	}
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

func benchSyncScript(b *testing.B, script *Script, perCall int) {
	const keyspace = 391 * 256 // about 100,000 keys
	// A server of its own: on one server shared by the runs, the keys the
	// earlier runs left (100,000 more each) made each run read dearer
	// than the last (12.0, 14.5, 19.6 us a message in three).
	c := redistest.Start(b).Client(b)
	ctx := b.Context()
	prefix := redistest.Prefix(b)
	keys := make([]string, keyspace) // each key's bucket
	for i := range keyspace {
		keys[i] = prefix + "{s}:b:" + strconv.Itoa(i)
	}
	totals := make([]int64, keyspace)
	const epoch = 1_000
	seq := int64(epoch)
	now := int64(1_700_000_000_000_000)
	next := 0
	if err := c.ScriptLoad(ctx, script.Source()).Err(); err != nil {
		b.Fatal(err)
	}
	var buf []byte
	per := ModeReserve.KeyArgs()
	args := make([]any, SyncHeaderArgs+per*perCall)
	replies := make([]SyncReply, perCall)
	ends := make([]int, perCall)
	call := func() {
		h := SyncHeader{NowUS: now, LedgerTTLMS: 60_000, Mode: ModeReserve, Instance: "i", AllowanceLifeUS: 1_000_000}.Args()
		copy(args, h[:])
		from := next
		buf = buf[:0]
		for j := range perCall {
			seq++
			m := SyncMsg{Rate: 1000, PeriodUS: 1_000_000, Burst: 1000, Seq: seq, Epoch: epoch,
				Base: totals[next], Value: totals[next] + 6, Budget: -1}
			buf = m.Append(buf)
			ends[j] = len(buf)
			next = (next + 1) % keyspace
		}
		all := string(buf)
		start := 0
		for j, end := range ends {
			a := args[SyncHeaderArgs+per*j:]
			a[0], a[1] = &keys[from+j], all[start:end]
			start = end
		}
		reply, err := script.EvalShaInts(ctx, c, keys[from:from+1], args).Result()
		if err != nil {
			b.Fatal(err)
		}
		if err := ParseSyncReplies(reply, replies); err != nil {
			b.Fatal(err)
		}
		for j, r := range replies {
			totals[from+j] = r.Total
		}
		if next == 0 {
			now += 1_000_000
		}
	}
	for range keyspace / perCall {
		call()
	}
	before, cpuBefore := evalUsec(b, c), redisCPU(b, c)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		call()
	}
	b.StopTimer()
	b.ReportMetric(float64(evalUsec(b, c)-before)/float64(b.N*perCall), "redis-us/key")
	b.ReportMetric((redisCPU(b, c)-cpuBefore)*1e6/float64(b.N*perCall), "redis-cpu-us/key")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N*perCall), "us/key")
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
