package scripts

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// reshardModel states reshard.lua's ops on one bucket from their
// definitions: the bucket is full (absent, or a time already past), a
// theoretical arrival time, or a marker.
type reshardModel struct {
	interval, tolerance float64 // microseconds
	exists              bool
	marker              string // set when the bucket is a marker
	tat                 float64
}

func (m *reshardModel) store(tat, now float64) {
	if tat > now {
		m.exists, m.marker, m.tat = true, "", tat
	} else {
		m.exists, m.marker = false, ""
	}
}

// apply returns the reply {done, tokens, now} of op.
func (m *reshardModel) apply(op, marker string, n int64, now float64) [3]int64 {
	reply := func(done bool, tokens int64) [3]int64 {
		d := int64(0)
		if done {
			d = 1
		}
		return [3]int64{d, tokens, int64(now)}
	}
	if m.exists && m.marker == "" && m.tat <= now {
		m.exists = false // refilled: a time past is a full bucket
	}
	closed := m.exists && m.marker != ""
	switch op {
	case "open":
		if m.exists {
			return reply(false, 0)
		}
		m.store(now+m.tolerance, now)
		return reply(true, 0)
	case "close":
		if closed {
			return reply(false, 0)
		}
		tat := now
		if m.exists {
			tat = math.Max(m.tat, now)
		}
		held := math.Max(0, math.Floor((m.tolerance-(tat-now))/m.interval+1e-6))
		m.exists, m.marker = true, marker
		return reply(true, int64(held))
	case "credit":
		if closed || !m.exists {
			return reply(false, 0)
		}
		m.store(math.Max(now, m.tat-float64(n)*m.interval), now)
		return reply(true, 0)
	case "mark":
		if m.exists && !closed {
			return reply(false, 0)
		}
		if closed && markerGen(m.marker) > markerGen(marker) {
			marker = m.marker // never back to an earlier generation
		}
		m.exists, m.marker = true, marker
		return reply(true, 0)
	}
	panic("unknown op " + op)
}

// markerGen returns the generation a marker "m<shards>.<gen>" names.
func markerGen(marker string) int {
	_, gen, _ := strings.Cut(marker, ".")
	g, err := strconv.Atoi(gen)
	if err != nil {
		panic("bad marker " + marker)
	}
	return g
}

// TestReshardMatchesModel plays random sequences of reshard ops, at
// explicit times, on a real server and on the model, and requires the
// same replies and the same stored bucket after every op; every key the
// script writes has a TTL. Times move in whole seconds and a token is 360
// seconds, so a stored time is either due (full) or at least a second
// ahead: no key can lapse under the test's feet.
func TestReshardMatchesModel(t *testing.T) {
	c := redistest.Standalone(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	rng := rand.New(rand.NewPCG(5, 8))
	const rate, periodUS, burst = 10, 3_600_000_000, 5
	ops := []string{"open", "close", "credit", "mark"}
	for seq := range 150 {
		key := fmt.Sprintf("%sb%d", prefix, seq)
		m := &reshardModel{interval: periodUS / rate, tolerance: burst * periodUS / rate}
		now := int64(1_800_000_000_000_000)
		for i := range 30 {
			now += int64(rng.IntN(900)) * 1_000_000
			op := ops[rng.IntN(len(ops))]
			marker := "m" + strconv.Itoa(1+rng.IntN(4)) + "." + strconv.Itoa(rng.IntN(3))
			n := int64(rng.IntN(2 * burst))
			if op == "close" || op == "mark" {
				n = 60_000 // the marker's TTL in milliseconds
			}
			want := m.apply(op, marker, n, float64(now))
			step := ReshardStep{Op: ReshardOp(op), Rate: rate, PeriodUS: int64(periodUS), Burst: burst, Marker: marker, N: n}
			raw, err := Reshard.Run(ctx, c, []string{key}, append([]any{now}, step.Args()...)...)
			if err != nil {
				t.Fatalf("seq %d op %d %s: %v", seq, i, op, err)
			}
			reply, err := ParseReshardReply(raw)
			if err != nil {
				t.Fatal(err)
			}
			got := [3]int64{0, reply.Tokens, reply.At.UnixMicro()}
			if reply.Done {
				got[0] = 1
			}
			if got != want {
				t.Fatalf("seq %d op %d %s(n=%d) at +%ds: script %v, model %v", seq, i, op, n, (now-1_800_000_000_000_000)/1e6, got, want)
			}
			val, err := c.HGet(ctx, key, "t").Result()
			switch {
			case !m.exists:
				// Absent, or a time not ahead of now: both a full bucket.
				if f, perr := strconv.ParseFloat(val, 64); err == nil && (perr != nil || f > float64(now)) {
					t.Fatalf("seq %d op %d %s: bucket %q, model has a full one", seq, i, op, val)
				}
			case m.marker != "":
				if val != m.marker {
					t.Fatalf("seq %d op %d %s: bucket %q, model marker %q", seq, i, op, val, m.marker)
				}
			default:
				if f, perr := strconv.ParseFloat(val, 64); perr != nil || f != m.tat {
					t.Fatalf("seq %d op %d %s: bucket %q, model tat %.17g", seq, i, op, val, m.tat)
				}
			}
			if m.exists {
				if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 {
					t.Fatalf("seq %d op %d %s: bucket without TTL (%v)", seq, i, op, ttl)
				}
			}
		}
	}
}

// TestLock checks the lock: taken once, refused while held, released
// only by its holder, and never without a TTL.
func TestLock(t *testing.T) {
	c := redistest.Standalone(t)
	ctx := context.Background()
	lock := redistest.Prefix(t) + "lock"
	run := func(holder string, ms int64) bool {
		raw, err := Lock.Run(ctx, c, []string{lock}, 0, holder, ms)
		if err != nil {
			t.Fatal(err)
		}
		done, err := ParseLockReply(raw)
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	if !run("a", 5_000) || run("b", 5_000) || run("b", 0) || !run("a", 0) || !run("b", 5_000) {
		t.Error("want a takes it, b refused, b cannot release a's, a releases, b takes it")
	}
	if ttl := c.PTTL(ctx, lock).Val(); ttl <= 0 {
		t.Errorf("lock without TTL (%v)", ttl)
	}
}
