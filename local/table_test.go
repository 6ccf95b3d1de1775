package local

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// tableSubject drives one key of a Table.
type tableSubject struct {
	tb  *Table
	key string
	t0  time.Time
}

func (s *tableSubject) take(at time.Duration, n int64) (hybridlimit.Result, error) {
	return s.tb.AllowN(s.key, s.t0.Add(at), gridLimit, n)
}

func (s *tableSubject) peek(at time.Duration, n int64) (hybridlimit.Result, error) {
	return s.tb.Peek(s.key, s.t0.Add(at), gridLimit, n)
}

func (s *tableSubject) tokens(at time.Duration) int64 {
	r, _ := s.tb.Peek(s.key, s.t0.Add(at), gridLimit, 1)
	return r.Remaining
}

func (s *tableSubject) add(at time.Duration, n int64) {
	if err := s.tb.Add(s.key, s.t0.Add(at), gridLimit, n); err != nil {
		panic(err)
	}
}

func (s *tableSubject) set(at time.Duration, k int64) {
	if err := s.tb.Set(s.key, s.t0.Add(at), gridLimit, k); err != nil {
		panic(err)
	}
}

func mustTable(t testing.TB, opts ...Option) *Table {
	t.Helper()
	tb, err := NewTable(opts...)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	return tb
}

func TestTableGrid(t *testing.T) {
	for _, tc := range gridCases {
		t.Run(tc.name, func(t *testing.T) {
			run(t, &tableSubject{mustTable(t), "k", time.Now()}, tc.steps)
		})
		t.Run(tc.name+"/2001", func(t *testing.T) {
			run(t, &tableSubject{mustTable(t), "k", time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)}, tc.steps)
		})
	}
}

func TestTableAllowResult(t *testing.T) {
	tb, t0 := mustTable(t), time.Now()
	want := []hybridlimit.Result{
		{Limit: gridLimit, Allowed: true, Remaining: 2, ResetAfter: tick},
		{Limit: gridLimit, Allowed: true, Remaining: 1, ResetAfter: 2 * tick},
		{Limit: gridLimit, Allowed: true, Remaining: 0, ResetAfter: 3 * tick},
		{Limit: gridLimit, Allowed: false, Remaining: 0, RetryAfter: tick, ResetAfter: 3 * tick},
	}
	for i, w := range want {
		if got, err := tb.AllowN("k", t0, gridLimit, 1); err != nil || got != w {
			t.Errorf("AllowN(k, t0, 1) #%d = %+v, %v; want %+v", i, got, err, w)
		}
	}
}

func TestTableKeysAreIndependent(t *testing.T) {
	tb, t0 := mustTable(t), time.Now()
	for i := range 100 {
		key := "user:" + strconv.Itoa(i)
		if r, _ := tb.AllowN(key, t0, gridLimit, 3); !r.Allowed {
			t.Fatalf("AllowN(%s, t0, 3) = false, want true", key)
		}
		if r, _ := tb.AllowN(key, t0, gridLimit, 1); r.Allowed {
			t.Fatalf("AllowN(%s, t0, 1) = true, want false", key)
		}
	}
	if got := tb.Len(); got != 100 {
		t.Errorf("Len() = %d, want 100", got)
	}
}

func TestTableImplicitTime(t *testing.T) {
	tb := mustTable(t)
	l := hybridlimit.Limit{Rate: 1, Period: time.Hour, Burst: 2}
	for i, want := range []bool{true, true, false} {
		r, err := tb.Allow("k", l)
		if err != nil || r.Allowed != want {
			t.Errorf("Allow(k) #%d = %v, %v; want %v", i, r.Allowed, err, want)
		}
	}
	if _, err := tb.Allow("", l); !errors.Is(err, hybridlimit.ErrInvalidKey) {
		t.Errorf("Allow(\"\") error = %v, want %v", err, hybridlimit.ErrInvalidKey)
	}
	if r, err := tb.Allow("new", l); err != nil || !r.Allowed || r.Remaining != 1 {
		t.Errorf("Allow(new) = %+v, %v; want allowed with 1 remaining", r, err)
	}
}

// TestTableLimitChange checks that a key called with another limit keeps
// the tokens it holds, cut to the new burst, and runs at the new rate.
func TestTableLimitChange(t *testing.T) {
	a := hybridlimit.Limit{Rate: 10, Period: time.Second, Burst: 10}
	b := hybridlimit.Limit{Rate: 1, Period: time.Second, Burst: 5}
	tb, t0 := mustTable(t), time.Now()
	tb.AllowN("k", t0, a, 10) // empty; 3 tokens at t0+300ms
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	if r, _ := tb.Peek("k", at(300*time.Millisecond), b, 1); r.Remaining != 3 || r.Limit != b || r.ResetAfter != 2*time.Second {
		t.Errorf("Peek(k, t0+300ms, b) = %+v, want 3 remaining under b, full in 2s", r)
	}
	if r, _ := tb.AllowN("k", at(300*time.Millisecond), b, 3); !r.Allowed || r.Remaining != 0 || r.ResetAfter != 5*time.Second {
		t.Errorf("AllowN(k, t0+300ms, b, 3) = %+v, want allowed with 0 remaining, full in 5s", r)
	}
	if r, _ := tb.AllowN("k", at(1299*time.Millisecond), b, 1); r.Allowed {
		t.Error("AllowN(k, t0+1299ms, b, 1) = true, want false: b adds one token a second")
	}
	if r, _ := tb.AllowN("k", at(1300*time.Millisecond), b, 1); !r.Allowed {
		t.Error("AllowN(k, t0+1300ms, b, 1) = false, want true")
	}
	// Back to a, empty: a token of a away.
	if r, _ := tb.AllowN("k", at(1300*time.Millisecond), a, 1); r.Allowed || r.RetryAfter != 100*time.Millisecond {
		t.Errorf("AllowN(k, t0+1.3s, a, 1) = %+v, want denied, retry in 100ms", r)
	}
	if err := tb.Add("k", at(1300*time.Millisecond), b, 2); err != nil {
		t.Fatal(err)
	}
	if r, _ := tb.Peek("k", at(1300*time.Millisecond), b, 1); r.Remaining != 2 {
		t.Errorf("Peek after Add under b = %+v, want 2 remaining", r)
	}
}

// TestTableLimitChangeAtPresent checks that a limit change brought by a
// call at an earlier time converts at the latest time the Table has seen:
// a key switched between two limits by calls at two times, the later
// spending under the slow limit, the earlier under the fast one, gains no
// refill from the switches. Converted at the caller's time, each switch
// handed the key the fast limit's refill over the gap between the two
// times: 200 admitted of the 5 tokens held.
func TestTableLimitChangeAtPresent(t *testing.T) {
	slow, fast := hybridlimit.PerSecond(10), hybridlimit.PerSecond(1000).WithBurst(10)
	tb, now := mustTable(t), time.Now()
	early := now.Add(-100 * time.Millisecond)
	tb.AllowN("k", now, slow, 5) // 5 tokens left at now
	admitted := 0
	for range 100 {
		if r, _ := tb.AllowN("k", early, fast, 1); r.Allowed {
			admitted++
		}
		if r, _ := tb.AllowN("k", now, slow, 1); r.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("admitted %d at two frozen times, want the 5 tokens held", admitted)
	}
}

// TestTableReclaim checks that inserts forget buckets that have been full
// for idleAfter, and only those.
func TestTableReclaim(t *testing.T) {
	idle := time.Duration(idleAfter)
	// The grid lies in the past: a Table reclaims by no time later than
	// its clock (plus presentLead), whatever time a caller brings.
	tb, t0 := mustTable(t, WithShards(1)), time.Now().Add(-3*idle)
	tb.AllowN("a", t0, gridLimit, 3) // full again at t0+300ms
	tb.AllowN("b", t0.Add(idle+300*time.Millisecond), gridLimit, 3)
	if got := tb.Len(); got != 1 {
		t.Errorf("Len() = %d after inserting b at t0+%v+300ms, want 1: a has been full since t0+300ms", got, idle)
	}
	tb.AllowN("c", t0.Add(2*idle+599*time.Millisecond), gridLimit, 1)
	if got := tb.Len(); got != 2 {
		t.Errorf("Len() = %d after inserting c, want 2: b has been full for just under %v", got, idle)
	}
	if r, _ := tb.Peek("a", t0.Add(idle), gridLimit, 3); !r.Allowed || r.Remaining != 3 {
		t.Errorf("Peek(a) after reclaim = %+v, want a full bucket", r)
	}
}

// TestTableCapacity checks that a full shard makes room by dropping the
// bucket closest to full.
func TestTableCapacity(t *testing.T) {
	l := hybridlimit.PerSecond(10)
	tb, t0 := mustTable(t, WithMaxKeys(2), WithShards(1)), time.Now()
	tb.AllowN("a", t0, l, 1) // 9 of 10 left
	tb.AllowN("b", t0, l, 5) // 5 of 10 left
	tb.AllowN("c", t0, l, 8) // drops a
	if got := tb.Len(); got != 2 {
		t.Errorf("Len() = %d, want 2", got)
	}
	for key, want := range map[string]int64{"a": 10, "b": 5, "c": 2} {
		if r, _ := tb.Peek(key, t0, l, 1); r.Remaining != want {
			t.Errorf("Peek(%s).Remaining = %d, want %d", key, r.Remaining, want)
		}
	}
	for i := range 1000 {
		tb.AllowN("k"+strconv.Itoa(i), t0, l, 1)
		if got := tb.Len(); got > 2 {
			t.Fatalf("Len() = %d, want at most 2", got)
		}
	}
}

// TestTableMaxKeysIsABound fills tables whose key bound does not divide
// evenly over their shards, or is below their shard count: they held up
// to a shard count's worth of keys more (256 for WithMaxKeys(10) over
// 256 shards, 16,640 for 16,385 over the default 256).
func TestTableMaxKeysIsABound(t *testing.T) {
	l := hybridlimit.PerSecond(10)
	for _, tc := range []struct {
		opts []Option
		max  int
	}{
		{[]Option{WithMaxKeys(10), WithShards(256)}, 10},
		{[]Option{WithMaxKeys(64*256 + 1)}, 64*256 + 1},
		{[]Option{WithMaxKeys(3), WithShards(2)}, 3},
	} {
		tb, t0 := mustTable(t, tc.opts...), time.Now()
		for i := range 4 * tc.max {
			if _, err := tb.AllowN("k"+strconv.Itoa(i), t0, l, 1); err != nil {
				t.Fatal(err)
			}
		}
		if got := tb.Len(); got > tc.max || got < tc.max/2 {
			t.Errorf("WithMaxKeys(%d): Len() = %d after %d keys, want at most %d and not far below", tc.max, got, 4*tc.max, tc.max)
		}
	}
}

// TestTableEvictChoice checks the choice of victim: an idle bucket first,
// else the bucket short of the fewest tokens.
func TestTableEvictChoice(t *testing.T) {
	l := hybridlimit.PerSecond(10)
	for _, tc := range []struct {
		name   string
		tokens []int64 // -1: idle
		victim string
	}{
		{"fullest", []int64{2, 9, 3, 7}, "k1"},
		{"idle first", []int64{2, 9, -1, 7}, "k2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, t0 := mustTable(t, WithShards(1), WithMaxKeys(len(tc.tokens))), time.Now()
			for i, k := range tc.tokens {
				key := "k" + strconv.Itoa(i)
				if k < 0 { // spent long ago, full for long since
					tb.Set(key, t0.Add(-2*time.Duration(idleAfter)), l, 0)
				} else {
					tb.Set(key, t0, l, k)
				}
			}
			tb.shards[0].hand = 0 // sample them all
			tb.Set("new", t0, l, 0)
			if tb.Len() != len(tc.tokens) {
				t.Errorf("Len() = %d, want %d", tb.Len(), len(tc.tokens))
			}
			for i := range tc.tokens {
				key := "k" + strconv.Itoa(i)
				_, found := tb.lookup(&tb.shards[0], maphash.String(tb.seed, key), key)
				if found != (key != tc.victim) {
					t.Errorf("after evicting: %s present = %v, want %v", key, found, key != tc.victim)
				}
			}
		})
	}
}

// TestTableEvictFewestTokens checks that eviction among keys of different
// limits forgets the one short of the fewest tokens, which admits the
// fewest extra, not the one holding the largest share of its burst.
func TestTableEvictFewestTokens(t *testing.T) {
	big, small := hybridlimit.PerSecond(1000), hybridlimit.PerSecond(1)
	tb, t0 := mustTable(t, WithShards(1), WithMaxKeys(2)), time.Now()
	tb.Set("big", t0, big, 900)   // 100 tokens short, 90% full
	tb.Set("small", t0, small, 0) // 1 token short, empty
	tb.shards[0].hand = 0         // sample them all
	tb.Set("new", t0, small, 0)
	for key, want := range map[string]bool{"big": true, "small": false} {
		if _, found := tb.lookup(&tb.shards[0], maphash.String(tb.seed, key), key); found != want {
			t.Errorf("after evicting: %s present = %v, want %v", key, found, want)
		}
	}
}

func TestTableSweep(t *testing.T) {
	// In the past, as in TestTableReclaim.
	tb, t0 := mustTable(t, WithShards(1)), time.Now().Add(-3*time.Duration(idleAfter))
	for i := range 1000 {
		tb.AllowN("k"+strconv.Itoa(i), t0, gridLimit, 3)
	}
	if got := tb.Sweep(t0); got != 0 {
		t.Errorf("Sweep(t0) = %d, want 0", got)
	}
	idle := time.Duration(idleAfter)
	tb.AllowN("late", t0.Add(time.Second), gridLimit, 3) // full at t0+1.3s
	// The others are full from t0+300ms on.
	if got := tb.Sweep(t0.Add(idle + 299*time.Millisecond)); got != 0 {
		t.Errorf("Sweep(t0+%v+299ms) = %d, want 0: the buckets have been full for under %v", idle, got, idle)
	}
	if got := tb.Sweep(t0.Add(idle + 300*time.Millisecond)); got != 1000 {
		t.Errorf("Sweep(t0+%v+300ms) = %d, want 1000", idle, got)
	}
	if got := tb.Len(); got != 1 {
		t.Errorf("Len() = %d, want 1", got)
	}
	if n := len(tb.shards[0].index.Load().s); n > 8 {
		t.Errorf("%d slots after sweeping 1000 keys of 1001, want the table shrunk to 8", n)
	}
	if r, _ := tb.Peek("late", t0.Add(idle+300*time.Millisecond), gridLimit, 1); r.Remaining != 3 {
		t.Errorf("Peek(late) = %+v, want 3 remaining", r)
	}
}

func TestTableDelete(t *testing.T) {
	tb, t0 := mustTable(t), time.Now()
	tb.AllowN("k", t0, gridLimit, 3)
	if !tb.Delete("k") || tb.Delete("k") || tb.Delete("") {
		t.Error("Delete(k) = false or a second Delete(k) = true")
	}
	if r, _ := tb.AllowN("k", t0, gridLimit, 3); !r.Allowed {
		t.Error("AllowN(k, t0, 3) after Delete = false, want true")
	}
}

func TestTableSetAndAddAbsent(t *testing.T) {
	tb, t0 := mustTable(t), time.Now()
	if err := tb.Add("a", t0, gridLimit, 2); err != nil || tb.Len() != 0 {
		t.Errorf("Add on an absent key = %v, Len %d; want nil, 0", err, tb.Len())
	}
	if err := tb.Set("a", t0, gridLimit, 3); err != nil || tb.Len() != 0 {
		t.Errorf("Set(full) on an absent key = %v, Len %d; want nil, 0", err, tb.Len())
	}
	if err := tb.Set("a", t0, gridLimit, 1); err != nil || tb.Len() != 1 {
		t.Errorf("Set(1) on an absent key = %v, Len %d; want nil, 1", err, tb.Len())
	}
	if r, _ := tb.Peek("a", t0, gridLimit, 1); r.Remaining != 1 {
		t.Errorf("Peek after Set(1) = %+v, want 1 remaining", r)
	}
}

func TestTableBadInput(t *testing.T) {
	tb, t0 := mustTable(t), time.Now()
	for _, key := range []string{"", strings.Repeat("x", hybridlimit.MaxKeyLen+1)} {
		if _, err := tb.AllowN(key, t0, gridLimit, 1); !errors.Is(err, hybridlimit.ErrInvalidKey) {
			t.Errorf("AllowN(%.8q…) error = %v, want %v", key, err, hybridlimit.ErrInvalidKey)
		}
		if _, err := tb.Peek(key, t0, gridLimit, 1); !errors.Is(err, hybridlimit.ErrInvalidKey) {
			t.Errorf("Peek(%.8q…) error = %v, want %v", key, err, hybridlimit.ErrInvalidKey)
		}
		if err := tb.Add(key, t0, gridLimit, 1); !errors.Is(err, hybridlimit.ErrInvalidKey) {
			t.Errorf("Add(%.8q…) error = %v, want %v", key, err, hybridlimit.ErrInvalidKey)
		}
		if err := tb.Set(key, t0, gridLimit, 1); !errors.Is(err, hybridlimit.ErrInvalidKey) {
			t.Errorf("Set(%.8q…) error = %v, want %v", key, err, hybridlimit.ErrInvalidKey)
		}
	}
	tb.AllowN("present", t0, gridLimit, 1)
	for _, l := range badLimits {
		for _, key := range []string{"absent", "present"} {
			if _, err := tb.AllowN(key, t0, l, 1); !errors.Is(err, hybridlimit.ErrInvalidLimit) {
				t.Errorf("AllowN(%s, %+v) error = %v, want %v", key, l, err, hybridlimit.ErrInvalidLimit)
			}
			if _, err := tb.Peek(key, t0, l, 1); !errors.Is(err, hybridlimit.ErrInvalidLimit) {
				t.Errorf("Peek(%s, %+v) error = %v, want %v", key, l, err, hybridlimit.ErrInvalidLimit)
			}
			if err := tb.Set(key, t0, l, 1); !errors.Is(err, hybridlimit.ErrInvalidLimit) {
				t.Errorf("Set(%s, %+v) error = %v, want %v", key, l, err, hybridlimit.ErrInvalidLimit)
			}
			if err := tb.Add(key, t0, l, 1); !errors.Is(err, hybridlimit.ErrInvalidLimit) {
				t.Errorf("Add(%s, %+v) error = %v, want %v", key, l, err, hybridlimit.ErrInvalidLimit)
			}
		}
	}
	for _, bc := range badCosts {
		for _, key := range []string{"absent", "present"} {
			if _, err := tb.AllowN(key, t0, gridLimit, bc.n); !errors.Is(err, bc.want) {
				t.Errorf("AllowN(%s, t0, %d) error = %v, want %v", key, bc.n, err, bc.want)
			}
			if _, err := tb.Peek(key, t0, gridLimit, bc.n); !errors.Is(err, bc.want) {
				t.Errorf("Peek(%s, t0, %d) error = %v, want %v", key, bc.n, err, bc.want)
			}
		}
	}
	if got := tb.Len(); got != 1 {
		t.Errorf("bad input added keys: Len() = %d, want 1", got)
	}
	if r, _ := tb.Peek("present", t0, gridLimit, 1); r.Remaining != 2 {
		t.Errorf("bad input spent tokens: Peek(present) = %+v, want 2 remaining", r)
	}
	// Extreme times are answered, not panicked on.
	for _, at := range []time.Time{{}, time.Unix(math.MaxInt64/2, 0), t0.Add(math.MaxInt64), t0.Add(math.MinInt64)} {
		tb.AllowN("present", at, gridLimit, 1)
		tb.Add("present", at, gridLimit, math.MaxInt64)
		tb.Set("x", at, gridLimit, math.MinInt64)
		tb.Sweep(at)
		if r, _ := tb.Peek("present", at, gridLimit, 1); r.Remaining < 0 || r.Remaining > gridLimit.Burst {
			t.Errorf("Peek at %v = %+v, outside [0, %d]", at, r, gridLimit.Burst)
		}
	}
	// The zero Table refuses politely.
	var zero Table
	if _, err := zero.AllowN("k", t0, gridLimit, 1); !errors.Is(err, ErrZeroTable) {
		t.Errorf("zero Table: AllowN error = %v, want %v", err, ErrZeroTable)
	}
	if _, err := zero.Allow("k", gridLimit); !errors.Is(err, ErrZeroTable) {
		t.Errorf("zero Table: Allow error = %v, want %v", err, ErrZeroTable)
	}
	if zero.Delete("k") || zero.Len() != 0 || zero.Sweep(t0) != 0 {
		t.Error("zero Table: Delete, Len or Sweep found something")
	}
}

// TestTableConcurrentBurst has many goroutines race for one key at one
// frozen instant, while others insert, delete and sweep around it: exactly
// Burst tokens are admitted, never more.
func TestTableConcurrentBurst(t *testing.T) {
	const (
		burst      = 1000
		goroutines = 16
	)
	l := hybridlimit.Limit{Rate: 1, Period: time.Hour, Burst: burst}
	for _, name := range []string{"new key", "present key", "clock"} {
		t.Run(name, func(t *testing.T) {
			tb, t0 := mustTable(t, WithShards(4), WithMaxKeys(1<<12)), time.Now()
			if name == "present key" {
				tb.AllowN("hot", t0, l, 1)
				tb.Add("hot", t0, l, 1)
			}
			var (
				admitted atomic.Int64
				start    = make(chan struct{})
				wg       sync.WaitGroup
			)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := range burst / 4 {
						var r hybridlimit.Result
						var err error
						if name == "clock" {
							r, err = tb.Allow("hot", l)
						} else {
							r, err = tb.AllowN("hot", t0, l, 1)
						}
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							admitted.Add(1)
						}
						// Churn around the hot key.
						switch other := "g" + strconv.Itoa(g) + "-" + strconv.Itoa(i%50); i % 4 {
						case 0:
							tb.AllowN(other, t0, l, 1)
						case 1:
							tb.Delete(other)
						case 2:
							tb.Sweep(t0)
						case 3:
							tb.Peek("hot", t0, l, 1)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			if got := admitted.Load(); got != burst {
				t.Errorf("%d goroutines admitted %d, want exactly %d", goroutines, got, burst)
			}
		})
	}
}

// TestTableReclaimRace races decisions on an idle key against inserts that
// reclaim it: a decision that loses the race starts again on a fresh entry,
// so exactly Burst tokens are admitted at one instant, never more.
func TestTableReclaimRace(t *testing.T) {
	const burst = 200
	l := hybridlimit.Limit{Rate: 1, Period: time.Hour, Burst: burst}
	for round := range 20 {
		tb, t0 := mustTable(t, WithShards(1)), time.Now()
		// Idle: spent, then full again for far longer than idleAfter.
		at := t0.Add(-2*time.Hour - 2*time.Duration(idleAfter))
		tb.AllowN("hot", at, l, 1)
		tb.Delete("warm") // no-op, for the race detector
		var (
			admitted atomic.Int64
			start    = make(chan struct{})
			wg       sync.WaitGroup
		)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range burst {
					if g%2 == 0 {
						if r, _ := tb.AllowN("hot", t0, l, 1); r.Allowed {
							admitted.Add(1)
						}
					} else {
						tb.AllowN("k"+strconv.Itoa(g)+"-"+strconv.Itoa(i), t0, l, 1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		if got := admitted.Load(); got != burst {
			t.Fatalf("round %d: admitted %d, want exactly %d", round, got, burst)
		}
	}
}

// TestTableConcurrentLimits races calls with two limits on the same keys, for
// the race detector: answers stay within bounds.
func TestTableConcurrentLimits(t *testing.T) {
	limits := []hybridlimit.Limit{hybridlimit.PerSecond(10), {Rate: 3, Period: time.Minute, Burst: 7}}
	tb, t0 := mustTable(t, WithShards(2), WithMaxKeys(8)), time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 2000 {
				l := limits[rng.IntN(2)]
				key := "k" + strconv.Itoa(rng.IntN(12))
				at := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
				var r hybridlimit.Result
				switch rng.IntN(5) {
				case 0:
					r, _ = tb.AllowN(key, at, l, 1+rng.Int64N(l.Burst))
				case 1:
					r, _ = tb.Peek(key, at, l, 1)
				case 2:
					tb.Add(key, at, l, rng.Int64N(5))
				case 3:
					tb.Set(key, at, l, rng.Int64N(12))
				case 4:
					r, _ = tb.Allow(key, l)
				}
				if r.Remaining < 0 || r.Remaining > max(limits[0].Burst, limits[1].Burst) {
					t.Errorf("Remaining = %d out of bounds", r.Remaining)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := tb.Len(); got > 8 {
		t.Errorf("Len() = %d, want at most 8", got)
	}
}

// FuzzTable drives a Table and a map of Cores with the same calls on a few
// keys and two limits. Times move back by less than the reclaim delay, so
// forgetting an idle bucket must never show.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 1, 0, 1, 0, 2, 0, 1, 0, 3, 0, 1, 4, 5, 0, 0, 0, 40, 0, 1})
	f.Add([]byte{0, 1, 0, 3, 1, 1, 1, 1, 2, 1, 5, 2, 3, 2, 9, 9, 5, 0, 120, 0, 6, 0, 0, 0, 7, 3, 0, 0})
	limits := []hybridlimit.Limit{gridLimit, {Rate: 7, Period: time.Second, Burst: 5}}
	f.Fuzz(func(t *testing.T, ops []byte) {
		tb := mustTable(t, WithShards(1))
		model := map[string]*Core{}
		// present is the Table's, which a conversion moves to the call's
		// time if later: the model converts there too (see Table.convert).
		present := func() int64 { return tb.shards[0].now.ns.Load() }
		// get returns key's model bucket, converted to l; an absent key is
		// a full bucket.
		get := func(key string, x int64, l hybridlimit.Limit) *Core {
			c, ok := model[key]
			if !ok {
				cc := mustCore(t, l, x)
				c = &cc
				model[key] = c
			} else if c.Limit() != l {
				c.SetLimit(max(x, present()), l)
			}
			return c
		}
		step := int64(tick / 4)
		if len(ops)%2 == 1 {
			step = idleAfter / 16 // long jumps, so idle buckets get reclaimed
		}
		x, latest := int64(epoch), int64(epoch)
		for ; len(ops) >= 4; ops = ops[4:] {
			kind, key, l := ops[0]%9, "k"+strconv.Itoa(int(ops[1]%3)), limits[ops[1]/3%2]
			x = max(x+int64(int8(ops[2]))*step, latest-idleAfter/2)
			latest = max(latest, x)
			n := int64(int8(ops[3]))
			at := tb.base.Add(time.Duration(x - epoch))
			switch kind {
			case 0, 1:
				got, gotErr := tb.AllowN(key, at, l, n)
				var (
					want    = hybridlimit.Result{Limit: l}
					wantErr = l.CheckCost(n) // a refused cost converts nothing
				)
				if wantErr == nil {
					want, wantErr = get(key, x, l).Take(x, n)
				}
				if got != want || !sameErr(gotErr, wantErr) {
					t.Fatalf("AllowN(%s, %d, %v, %d) = %+v, %v; want %+v, %v", key, x, l, n, got, gotErr, want, wantErr)
				}
			case 2:
				got, gotErr := tb.Peek(key, at, l, n)
				var c Core // a copy: a peek converts nothing
				if m, ok := model[key]; ok {
					c = *m
					if c.Limit() != l {
						c.SetLimit(max(x, present()), l)
					}
				} else {
					c = mustCore(t, l, x)
				}
				want, wantErr := c.Peek(x, n)
				if got != want || !sameErr(gotErr, wantErr) {
					t.Fatalf("Peek(%s, %d, %v, %d) = %+v, %v; want %+v, %v", key, x, l, n, got, gotErr, want, wantErr)
				}
			case 3:
				if err := tb.Add(key, at, l, n); err != nil {
					t.Fatal(err)
				}
				if n >= 1 {
					get(key, x, l).Add(x, n)
				}
			case 4:
				if err := tb.Set(key, at, l, n); err != nil {
					t.Fatal(err)
				}
				get(key, x, l).Set(x, n)
			case 5:
				tb.Delete(key)
				delete(model, key)
			case 6:
				tb.Sweep(at)
			case 7:
				// Insert an unrelated key, which reclaims idle ones.
				tb.AllowN("other"+strconv.Itoa(int(ops[3])), at, l, 1)
			case 8: // usage past what is left
				got, gotErr := tb.Charge(key, at, l, 4*n)
				want, wantErr := hybridlimit.Result{Limit: l}, error(nil)
				if n >= 0 { // a refused charge converts nothing
					want, wantErr = get(key, x, l).Charge(x, 4*n)
				} else {
					_, wantErr = (&Core{}).Charge(x, 4*n)
				}
				if got != want || !sameErr(gotErr, wantErr) {
					t.Fatalf("Charge(%s, %d, %v, %d) = %+v, %v; want %+v, %v", key, x, l, 4*n, got, gotErr, want, wantErr)
				}
			}
		}
	})
}

// The 1e6-key benchmarks share one fixture: the keys, a Table and a bare
// map holding them all, and the heap each took, measured once.
type keyFixture struct {
	keys                 []string
	limit                hybridlimit.Limit
	table                *Table
	baselineMu           sync.RWMutex
	baseline             map[string]*counter
	tableBytes, mapBytes float64 // heap per key
	seeds                atomic.Uint64
}

type counter struct{ n atomic.Int64 }

const fixtureKeys = 1_000_000

var keys1e6 = sync.OnceValue(func() *keyFixture {
	// 100/s per key: a key drawn about once a second is full again between
	// calls but not idle long enough to be reclaimed, so every call takes
	// the path of a key already present, with a compare-and-swap.
	fx := &keyFixture{keys: make([]string, fixtureKeys), limit: hybridlimit.PerSecond(100)}
	for i := range fx.keys {
		fx.keys[i] = fmt.Sprintf("user:%08d", i*7919%100_000_000)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}

	before := heap()
	tb, err := NewTable(WithMaxKeys(2 * fixtureKeys))
	if err != nil {
		panic(err)
	}
	now := time.Now()
	for _, k := range fx.keys {
		if _, err := tb.AllowN(k, now, fx.limit, 1); err != nil {
			panic(err)
		}
	}
	fx.table = tb
	fx.tableBytes = float64(heap()-before) / fixtureKeys

	before = heap()
	m := make(map[string]*counter)
	for _, k := range fx.keys {
		m[strings.Clone(k)] = &counter{} // cloned, as the Table clones
	}
	fx.baseline = m
	fx.mapBytes = float64(heap()-before) / fixtureKeys
	return fx
})

// xorshift is a per-goroutine PRNG, cheap enough not to show.
type xorshift uint64

func (x *xorshift) next(n int) int {
	*x ^= *x << 13
	*x ^= *x >> 7
	*x ^= *x << 17
	hi, _ := bits.Mul64(uint64(*x), uint64(n))
	return int(hi)
}

func BenchmarkTableAllow(b *testing.B) {
	b.Run("keys=1e6", func(b *testing.B) {
		fx := keys1e6()
		b.ReportAllocs()
		b.ResetTimer()
		defer func() { b.ReportMetric(fx.tableBytes, "B/key") }() // after ResetTimer, which clears metrics
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			rng := xorshift(fx.seeds.Add(0x9E3779B97F4A7C15))
			now := time.Now()
			for i := 0; pb.Next(); i++ {
				if i%1024 == 0 {
					now = time.Now()
				}
				fx.table.AllowN(fx.keys[rng.next(len(fx.keys))], now, fx.limit, 1)
			}
		})
	})
	b.Run("keys=1", func(b *testing.B) {
		tb := mustTable(b)
		l := hybridlimit.PerSecond(1 << 30)
		b.ReportAllocs()
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			now := time.Now()
			for i := 0; pb.Next(); i++ {
				if i%1024 == 0 {
					now = time.Now()
				}
				tb.AllowN("hot", now, l, 1)
			}
		})
	})
}

// BenchmarkMapBaseline is the floor BenchmarkTableAllow is held to: a bare
// map under one RWMutex read lock, plus one atomic add on the value found.
func BenchmarkMapBaseline(b *testing.B) {
	b.Run("keys=1e6", func(b *testing.B) {
		fx := keys1e6()
		b.ReportAllocs()
		b.ResetTimer()
		defer func() { b.ReportMetric(fx.mapBytes, "B/key") }()
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			rng := xorshift(fx.seeds.Add(0x9E3779B97F4A7C15))
			for pb.Next() {
				k := fx.keys[rng.next(len(fx.keys))]
				fx.baselineMu.RLock()
				c := fx.baseline[k]
				fx.baselineMu.RUnlock()
				c.n.Add(1)
			}
		})
	})
	b.Run("keys=1", func(b *testing.B) {
		var mu sync.RWMutex
		m := map[string]*counter{"hot": {}}
		b.ReportAllocs()
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.RLock()
				c := m["hot"]
				mu.RUnlock()
				c.n.Add(1)
			}
		})
	})
}

// TestTableLimitChangeAtEarlierTime is TestCoreSetLimitAtEarlierTime through
// a Table, whose key changes limit at a call three years back.
func TestTableLimitChangeAtEarlierTime(t *testing.T) {
	from, to := hybridlimit.PerSecond(10), hybridlimit.PerSecond(20)
	tb, now := mustTable(t), time.Now()
	past := now.Add(-3 * 365 * 24 * time.Hour)
	if r, _ := tb.AllowN("k", now, from, from.Burst); !r.Allowed {
		t.Fatalf("AllowN(k, now, %d) = %+v on a full bucket", from.Burst, r)
	}
	if r, _ := tb.AllowN("k", past, to, 1); r.Allowed {
		t.Errorf("AllowN(k, now-3y, %v, 1) = %+v, want denied", to, r)
	}
	if r, _ := tb.AllowN("k", now, to, 1); r.Allowed || r.RetryAfter != 50*time.Millisecond {
		t.Errorf("then AllowN(k, now, %v, 1) = %+v, want denied, retry in 50ms", to, r)
	}
}

// TestTableLimitChangeToHighRate is TestCoreSetLimitToHighRate through a
// Table, whose key changes limit.
func TestTableLimitChangeToHighRate(t *testing.T) {
	slow := hybridlimit.Every(7*time.Hour, 1)
	fast := hybridlimit.Limit{Rate: hybridlimit.MaxQuantity, Period: time.Millisecond, Burst: hybridlimit.MaxQuantity}
	tb, now := mustTable(t), time.Now()
	if r, _ := tb.AllowN("k", now, slow, 1); !r.Allowed {
		t.Fatalf("AllowN(k, now, %v, 1) = %+v on a full bucket", slow, r)
	}
	if r, _ := tb.AllowN("k", now, fast, fast.Burst); r.Allowed || r.Remaining != 0 {
		t.Errorf("then AllowN(k, now, %v, %d) = %+v, want denied with 0 remaining", fast, fast.Burst, r)
	}
}
