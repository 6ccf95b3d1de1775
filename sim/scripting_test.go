package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/lua"
)

// embeddedPair returns two embedded Redis servers, one running scripts in
// scripting and one in miniredis's own EVAL, each with a client, both
// clocks at at.
func embeddedPair(t *testing.T, at time.Time) (ours, theirs *redis.Client) {
	t.Helper()
	var cs [2]*redis.Client
	for i, scripts := range []bool{true, false} {
		e, err := newEmbeddedLua(scripts)
		if err != nil {
			t.Fatal(err)
		}
		e.SetTime(at)
		c := e.Client(nil)
		t.Cleanup(func() {
			_ = c.Close()
			e.Close()
		})
		cs[i] = c
	}
	return cs[0], cs[1]
}

// TestScriptingMatchesMiniredis runs scripts that meet each kind of value
// a script can return or receive from redis.call on both interpreters, and
// wants the same replies; for errors, errors on both.
func TestScriptingMatchesMiniredis(t *testing.T) {
	ctx := context.Background()
	ours, theirs := embeddedPair(t, epoch.Add(1500*time.Millisecond))
	tests := []struct {
		name   string
		script string
		keys   []string
		args   []any
		err    bool
	}{
		{"integer", "return 42", nil, nil, false},
		{"float truncates", "return 3.99", nil, nil, false},
		{"negative float", "return -3.99", nil, nil, false},
		{"string", "return 'hi'", nil, nil, false},
		{"true", "return true", nil, nil, false},
		{"false", "return false", nil, nil, true}, // a nil reply: redis.Nil
		{"nothing", "return", nil, nil, true},
		{"array to first nil", "return {1, 'a', {2, 3}, nil, 5}", nil, nil, false},
		{"status", "return redis.status_reply('FINE')", nil, nil, false},
		{"error reply", "return redis.error_reply('MY failure')", nil, nil, true},
		{"keys and argv", "return {KEYS[1], KEYS[2], ARGV[1], #KEYS, #ARGV}", []string{"a", "b"}, []any{"x", 7}, false},
		{"set and get", "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])", []string{"s"}, []any{"v"}, false},
		{"missing key is false", "return redis.call('GET', KEYS[1]) == false and 1 or 0", []string{"none"}, nil, false},
		{"number arguments", "redis.call('SET', KEYS[1], 12345678901); return redis.call('GET', KEYS[1])", []string{"n"}, nil, false},
		{"float arguments", "redis.call('SET', KEYS[1], 0.1 + 0.2); return redis.call('GET', KEYS[1])", []string{"f"}, nil, false},
		{"integer reply", "return redis.call('HSET', KEYS[1], 'f', 'v', 'g', 'w')", []string{"h"}, nil, false},
		{"array reply", "return redis.call('HMGET', KEYS[1], 'f', 'nope', 'g')", []string{"h"}, nil, false},
		{"status reply", "local r = redis.call('SET', KEYS[1], 'x'); return r.ok", []string{"t"}, nil, false},
		{"time", "return redis.call('TIME')", nil, nil, false},
		{"sorted set", "redis.call('ZADD', KEYS[1], 1.5, 'a', 3, 'b'); return redis.call('ZRANGEBYSCORE', KEYS[1], 0, 2, 'WITHSCORES')", []string{"z"}, nil, false},
		{"call error raises", "redis.call('HSET', KEYS[1]); return 1", []string{"h"}, nil, true},
		{"wrong type raises", "redis.call('SET', KEYS[1], 'x'); return redis.call('HGET', KEYS[1], 'f')", []string{"w"}, nil, true},
		{"pcall error is a table", "local r = redis.pcall('HGET', KEYS[1], 'f'); return type(r.err)", []string{"w"}, nil, false},
		{"runtime error", "error('boom')", nil, nil, true},
		{"syntax error", "return +", nil, nil, true},
		{"no globals", "x = 1; return 1", nil, nil, true},
		{"no unknown globals", "return undefined_thing", nil, nil, true},
		{"string library", "return string.format('%.17g', 0.1) .. string.match('12 34', '^(%d+) ')", nil, nil, false},
		{"math library", "return {math.floor(2.5), math.fmod(7, 3), math.max(1, 9)}", nil, nil, false},
		// The struct library (Go here, packed.lua's Lua in miniredis).
		{"packed numbers", packed + packedRoundTrip, nil, []any{packedData()}, false},
		{"packed format refused", packed + "return struct.pack('<i8', 1)", nil, nil, true},
		{"packed data short", packed + "return struct.unpack('<dd', ARGV[1])", nil, []any{"12345678"}, true},
	}
	for _, tt := range tests {
		var got, want any
		var gotErr, wantErr error
		// Run, twice, so that the second call is an EVALSHA of a cached
		// script, and so that the first cannot have left state behind.
		for range 2 {
			got, gotErr = redis.NewScript(tt.script).Run(ctx, ours, tt.keys, tt.args...).Result()
			want, wantErr = redis.NewScript(tt.script).Run(ctx, theirs, tt.keys, tt.args...).Result()
		}
		if (gotErr != nil) != tt.err || (wantErr != nil) != tt.err {
			t.Errorf("%s: error %v, miniredis %v; want an error: %v", tt.name, gotErr, wantErr, tt.err)
			continue
		}
		if tt.err {
			if (gotErr == redis.Nil) != (wantErr == redis.Nil) {
				t.Errorf("%s: error %v, miniredis %v", tt.name, gotErr, wantErr)
			}
			continue
		}
		if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
			t.Errorf("%s: reply %#v, miniredis %#v", tt.name, got, want)
		}
	}
}

// packed is lua/packed.lua, the struct library where the interpreter has
// none.
var packed = func() string {
	src, err := lua.File("packed.lua")
	if err != nil {
		panic(err)
	}
	return src + "\n"
}()

// packedRoundTrip reads each double of ARGV[1] and answers it packed again
// and as text, then a few numbers packed in one call.
const packedRoundTrip = `
local out, data = {}, ARGV[1]
for i = 1, #data / 8 do
  local v = struct.unpack('<d', data, 8 * i - 7)
  out[#out + 1] = struct.pack('<d', v)
  out[#out + 1] = string.format('%.17g', v)
end
out[#out + 1] = struct.pack('<ddd', 1, -2.5, 0.1)
return out`

// packedData returns finite doubles of every kind, packed.
func packedData() string {
	r := rand.New(rand.NewPCG(3, 4))
	var b []byte
	for _, v := range []float64{0, math.Copysign(0, -1), 1, -1, 1_700_000_000_123_456.5, 1<<53 - 1, math.SmallestNonzeroFloat64, math.MaxFloat64} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	for len(b) < 8*500 {
		if v := math.Float64frombits(r.Uint64()); !math.IsNaN(v) && !math.IsInf(v, 0) {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	return string(b)
}

func TestScriptingCommands(t *testing.T) {
	ctx := context.Background()
	ours, _ := embeddedPair(t, epoch)
	const src = "return ARGV[1]"
	sha := redis.NewScript(src).Hash()
	if err := ours.EvalSha(ctx, sha, nil, "x").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		t.Errorf("EVALSHA of an unknown script: %v, want NOSCRIPT", err)
	}
	if got, err := ours.ScriptLoad(ctx, src).Result(); err != nil || got != sha {
		t.Errorf("SCRIPT LOAD = %q, %v, want %q", got, err, sha)
	}
	if got, err := ours.EvalSha(ctx, strings.ToUpper(sha), nil, "x").Text(); err != nil || got != "x" {
		t.Errorf("EVALSHA after SCRIPT LOAD = %q, %v, want x", got, err)
	}
	if got, err := ours.ScriptExists(ctx, sha, "0000").Result(); err != nil || len(got) != 2 || !got[0] || got[1] {
		t.Errorf("SCRIPT EXISTS = %v, %v, want [true false]", got, err)
	}
	if err := ours.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ours.EvalSha(ctx, sha, nil, "x").Err(); err == nil {
		t.Error("EVALSHA after SCRIPT FLUSH succeeded")
	}
	for _, args := range [][]any{{"eval", src, -1}, {"eval", src, 2, "k"}, {"eval", src, "x"}, {"script", "nonsense"}} {
		if err := ours.Do(ctx, args...).Err(); err == nil {
			t.Errorf("%v succeeded", args)
		}
	}
}

// TestScriptingReportMatchesMiniredis runs a small report, every strategy,
// with scripts run in scripting and in miniredis's own EVAL, and wants the
// same report byte for byte: the interpreter kept across calls changes the
// cost of a run, not one decision.
func TestScriptingReportMatchesMiniredis(t *testing.T) {
	t.Parallel()
	cfg := smallConfig()
	// miniredis cannot read the flags line of the cluster variant of the
	// sync script; the one-server model sends the script without it.
	cfg.Standalone = true
	var out [2]bytes.Buffer
	for i, scripts := range []bool{true, false} {
		rep, err := runVirtual(context.Background(), cfg, scripts)
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteJSON(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Errorf("reports differ:\n%s\n--- miniredis EVAL:\n%s", out[0].Bytes(), out[1].Bytes())
	}
}
