package sync_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/faultproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

func TestNewRejectsBadConfig(t *testing.T) {
	c := redistest.Standalone(t)
	for name, rdb := range map[string]hybridlimit.Redis{
		"nil":                 nil,
		"typed nil":           (*redis.Client)(nil),
		"typed nil cluster":   (*redis.ClusterClient)(nil),
		"nil UniversalClient": redis.UniversalClient((*redis.Client)(nil)),
	} {
		// A typed nil was accepted, and the loop's first round panicked
		// in a goroutine of its own, killing the process.
		if l, err := hlsync.New(rdb); !errors.Is(err, hybridlimit.ErrNilClient) || l != nil {
			t.Errorf("New(%s client) = %v, %v; want ErrNilClient", name, l, err)
		}
	}
	bad := map[string]hlsync.Option{
		"nil option":             nil,
		"zero interval":          hlsync.WithSyncInterval(0, 0.1),
		"NaN jitter":             hlsync.WithSyncInterval(time.Second, math.NaN()),
		"huge jitter":            hlsync.WithSyncInterval(time.Second, 2),
		"negative keys per call": hlsync.WithTuning(hlsync.Tuning{MaxKeysPerCall: -1}),
		"huge keys per call":     hlsync.WithTuning(hlsync.Tuning{MaxKeysPerCall: 10001}),
		"negative wait":          hlsync.WithMaxWait(-time.Second),
		"tiny round timeout":     hlsync.WithRoundTimeout(time.Microsecond),
		"NaN lookahead":          hlsync.WithTuning(hlsync.Tuning{LeaseLookahead: math.NaN()}),
		"tiny lookahead":         hlsync.WithTuning(hlsync.Tuning{LeaseLookahead: 0.1}),
		"negative stretch":       hlsync.WithTuning(hlsync.Tuning{LeaseStretch: -1}),
		"huge stretch":           hlsync.WithTuning(hlsync.Tuning{LeaseStretch: 1 << 20}),
		"NaN stripe demand":      hlsync.WithTuning(hlsync.Tuning{StripeDemand: math.NaN()}),
		"negative groups":        hlsync.WithTuning(hlsync.Tuning{SlotGroups: -1}),
		"too many groups":        hlsync.WithTuning(hlsync.Tuning{SlotGroups: 1 << 20}),
		"negative linger":        hlsync.WithTuning(hlsync.Tuning{FetchLinger: -time.Millisecond}),
		"linger past the wait":   hlsync.WithTuning(hlsync.Tuning{FetchLinger: time.Second}),
		"zero max keys":          hlsync.WithMaxKeys(0),
		"brace prefix":           hlsync.WithPrefix("a{b"),
		"bad instance id":        hlsync.WithInstanceID("a b"),
		"empty instance id":      hlsync.WithInstanceID(""),
		"unknown policy":         hlsync.WithFailurePolicy(hybridlimit.FailurePolicy(9)),
		"unknown mode":           hlsync.WithMode(hlsync.Mode(7)),
		"negative budget":        hlsync.WithOvershootBudget(-0.5),
		"NaN budget":             hlsync.WithOvershootBudget(math.NaN()),
		"infinite threshold":     hlsync.WithLowLimitThreshold(math.Inf(1)),
		"nil logger":             hlsync.WithLogger(nil),
		"nil clock":              hlsync.WithClock(nil),
	}
	for name, opt := range bad {
		if l, err := hlsync.New(c, opt); err == nil || l != nil {
			t.Errorf("%s: New = %v, %v; want an error", name, l, err)
		}
	}
}

func TestAllowRejectsBadInput(t *testing.T) {
	redistest.NoLeaks(t)
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	ctx := context.Background()
	ok := hybridlimit.PerSecond(10)
	tests := []struct {
		name  string
		key   string
		limit hybridlimit.Limit
		cost  int64
		want  error
	}{
		{"zero limit", "k", hybridlimit.Limit{}, 1, hybridlimit.ErrInvalidLimit},
		{"negative rate", "k", hybridlimit.PerSecond(-1), 1, hybridlimit.ErrInvalidLimit},
		{"huge burst", "k", ok.WithBurst(math.MaxInt64), 1, hybridlimit.ErrInvalidLimit},
		{"zero cost", "k", ok, 0, hybridlimit.ErrInvalidCost},
		{"negative cost", "k", ok, -3, hybridlimit.ErrInvalidCost},
		{"cost above burst", "k", ok, 11, hybridlimit.ErrCostExceedsBurst},
		{"empty key", "", ok, 1, hybridlimit.ErrInvalidKey},
		{"huge key", strings.Repeat("k", hybridlimit.MaxKeyLen+1), ok, 1, hybridlimit.ErrInvalidKey},
	}
	for _, tt := range tests {
		r, err := l.AllowN(ctx, tt.key, tt.limit, tt.cost)
		if !errors.Is(err, tt.want) || r.Allowed {
			t.Errorf("%s: AllowN = %+v, %v; want %v and not allowed", tt.name, r, err, tt.want)
		}
	}
	// Binary keys and keys with braces are ordinary keys.
	for _, key := range []string{"\x00\xff", "{a}", "}{", "%7B"} {
		if r, err := l.Allow(ctx, key, ok); err != nil || !r.Allowed {
			t.Errorf("Allow(%q) = %+v, %v; want allowed", key, r, err)
		}
	}
}

func TestLifecycle(t *testing.T) {
	redistest.NoLeaks(t)
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := hybridlimit.PerSecond(100)
	// Before Start, decisions work: they fetch allowance themselves.
	if r, err := l.Allow(ctx, "k", limit); err != nil || !r.Allowed {
		t.Fatalf("Allow before Start = %+v, %v", r, err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); !errors.Is(err, hlsync.ErrRunning) {
		t.Errorf("second Start = %v, want ErrRunning", err)
	}
	if err := l.Run(ctx); !errors.Is(err, hlsync.ErrRunning) {
		t.Errorf("Run while started = %v, want ErrRunning", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(ctx); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if _, err := l.Allow(ctx, "k", limit); !errors.Is(err, hlsync.ErrClosed) {
		t.Errorf("Allow after Close = %v, want ErrClosed", err)
	}
	if err := l.Start(); !errors.Is(err, hlsync.ErrClosed) {
		t.Errorf("Start after Close = %v, want ErrClosed", err)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	redistest.NoLeaks(t)
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWait(t *testing.T) {
	redistest.NoLeaks(t)
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	// Low limit, so exact: one token every 100ms.
	limit := hybridlimit.Every(100*time.Millisecond, 1)
	ctx := context.Background()
	start := time.Now()
	for range 3 {
		if err := l.Wait(ctx, "w", limit); err != nil {
			t.Fatal(err)
		}
	}
	// The first is immediate, the next two wait about 100ms each.
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("three Waits took %v, want at least 150ms at 10 per second", d)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := l.Wait(short, "w", limit); !errors.Is(err, hlsync.ErrWouldExceedDeadline) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with a 10ms deadline = %v, want ErrWouldExceedDeadline", err)
	}
	if err := l.WaitN(ctx, "w", limit, 2); !errors.Is(err, hybridlimit.ErrCostExceedsBurst) {
		t.Errorf("WaitN cost 2 > burst 1 = %v, want ErrCostExceedsBurst", err)
	}
}

// TestWaitReturnsOnClose closes the limiter while a Wait sleeps out a
// denial's RetryAfter of about an hour: it slept on, past Close, to the
// end of it.
func TestWaitReturnsOnClose(t *testing.T) {
	redistest.NoLeaks(t)
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	limit := hybridlimit.Every(time.Hour, 1) // a low limit: exact, one token an hour
	ctx := context.Background()
	if err := l.Wait(ctx, "w", limit); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx, "w", limit) }()
	time.Sleep(100 * time.Millisecond) // the second Wait is asleep
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, hlsync.ErrClosed) {
			t.Errorf("Wait after Close = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still asleep 10s after Close returned")
	}
}

// behindProxy returns a fault proxy in front of srv and a client through
// it whose calls end with their context, closed when the test ends.
func behindProxy(t *testing.T, srv *redistest.Server) (*faultproxy.Proxy, *redis.Client) {
	p := faultproxy.Start(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return p, c
}

// TestCloseAsksForNothing closes a limiter holding an entry that a
// decision flagged and then gave up on (its max wait ended while another
// key's round was slow): the final round must hand back, not fetch what
// that decision waited for. Before, Close took a token from Redis and
// kept it, and a decision after Close spent it.
func TestCloseAsksForNothing(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	prefix := redistest.Prefix(t)
	p, c := behindProxy(t, srv)
	l, err := hlsync.New(c, hlsync.WithPrefix(prefix), hlsync.WithInstanceID("i0"),
		hlsync.WithSyncInterval(time.Second, 0), hlsync.WithMaxWait(50*time.Millisecond),
		hlsync.WithFailurePolicy(hybridlimit.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	limit := frozen(100) // a low limit: each decision fetches its cost
	ctx := context.Background()
	p.Delay(300 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = l.Allow(ctx, "a", limit) // starts a slow round
	}()
	time.Sleep(10 * time.Millisecond)
	_, _ = l.Allow(ctx, "b", limit) // flags b, waits for a's round, gives up
	<-done
	time.Sleep(800 * time.Millisecond) // a's round ends
	p.Delay(0)
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	rc := srv.Client(t)
	left := remaining(t, rc, prefix, "a", limit, 64) + remaining(t, rc, prefix, "b", limit, 64)
	if s.Outstanding != 0 || left != 200-int64(s.Admitted) {
		t.Errorf("after Close: %d outstanding, %d admitted, %d of 200 left in Redis", s.Outstanding, s.Admitted, left)
	}
	if r, err := l.Allow(ctx, "b", limit); err == nil && r.Allowed {
		t.Errorf("Allow after Close admitted: %+v", r)
	}
}

// TestCloseRetried closes a limiter while Redis cannot be reached: Close
// fails, and a second Close, once Redis is back, must
// still hand back the allowance the first could not (before, it returned
// nil at once and the tokens stayed leased until their ledger expired).
func TestCloseRetried(t *testing.T) {
	redistest.NoLeaks(t)
	srv := redistest.StandaloneServer(t)
	prefix := redistest.Prefix(t)
	p, c := behindProxy(t, srv)
	l, err := hlsync.New(c, hlsync.WithPrefix(prefix), hlsync.WithInstanceID("i0"),
		hlsync.WithSyncInterval(100*time.Millisecond, 0), hlsync.WithRoundTimeout(200*time.Millisecond),
		hlsync.WithLowLimitThreshold(0)) // a frozen limit still leases ahead
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	limit := frozen(10_000)
	ctx := context.Background()
	for range 50 {
		if _, err := l.Allow(ctx, "k", limit); err != nil {
			t.Fatal(err)
		}
	}
	if s := l.Stats(); s.Outstanding == 0 {
		t.Fatalf("nothing leased to hand back: %+v", s)
	}
	p.RefuseConnections(true)
	p.Disconnect()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = l.Close(short)
	cancel()
	if err == nil {
		t.Fatal("Close with Redis unreachable returned nil")
	}
	p.RefuseConnections(false)
	if err := l.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	s := l.Stats()
	left := remaining(t, srv.Client(t), prefix, "k", limit, 64)
	if s.Outstanding != 0 || left != 10_000-int64(s.Admitted) {
		t.Errorf("after the second Close: %d outstanding, %d admitted, %d of 10000 left in Redis", s.Outstanding, s.Admitted, left)
	}
	if err := l.Close(ctx); err != nil {
		t.Errorf("third Close: %v", err)
	}
}

// TestCostAboveBurstAfterLimitShrinks leases a key under a large burst,
// then asks under a burst of 5 for a cost of 7: an error, though the
// allowance leased before could pay it.
func TestCostAboveBurstAfterLimitShrinks(t *testing.T) {
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	ctx := context.Background()
	small := hybridlimit.Limit{Rate: 1000, Period: time.Second, Burst: 5}
	for _, limit := range []hybridlimit.Limit{hybridlimit.PerSecond(1000), small} {
		if r, err := l.Allow(ctx, "k", limit); err != nil || !r.Allowed {
			t.Fatalf("Allow under %v = %+v, %v", limit, r, err)
		}
	}
	if r, err := l.AllowN(ctx, "k", small, 7); !errors.Is(err, hybridlimit.ErrCostExceedsBurst) {
		t.Errorf("AllowN(cost 7, burst 5) = %+v, %v; want ErrCostExceedsBurst", r, err)
	}
}

// TestCallerTimeAheadStillIdles makes a key's first decision at a
// caller's time (AllowNAt) a day and 400 years ahead of the limiter's
// clock, then leaves it idle for an hour of rounds: its lease goes back
// and the entry is evicted, as for a key first decided now. Before, the
// entry took its last use from the caller's time and kept both until the
// clock got there (for ever, past the range of nanoseconds).
func TestCallerTimeAheadStillIdles(t *testing.T) {
	for _, years := range []int{-1, 0, 400} { // -1: now; 0: a day ahead
		clk := clock.New(time.Now())
		l := clocked(t, redistest.Standalone(t), clk, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithSyncInterval(100*time.Millisecond, 0))
		ctx := context.Background()
		at := clk.Now()
		if years >= 0 {
			at = at.Add(24*time.Hour).AddDate(years, 0, 0)
		}
		if r, err := l.AllowNAt(ctx, at, "k", hybridlimit.PerSecond(1000), 1); err != nil || !r.Allowed {
			t.Fatalf("first decision = %+v, %v", r, err)
		}
		for range 360 { // an hour of rounds, 10 s apart
			clk.Advance(10 * time.Second)
			_ = l.Sync(ctx)
		}
		if s := l.Stats(); s.Outstanding != 0 || s.Keys != 0 {
			t.Errorf("first decided at %v: after an hour idle %d keys tracked, %d tokens held; want none", at, s.Keys, s.Outstanding)
		}
	}
}

// TestIdleKeyLetsGoOnlyARefilledBucket leaves a key idle past the idle
// hold holding a lease beyond what its first decision cost. A decision of
// 1 under 1,000 a second left its bucket near full, refilled by then, so
// a hand-back would be cut at the burst: the lease goes, granted, spent by
// no one, without a message. A decision of 990 under 20 a second (burst
// 1,000) left it near empty, 200 tokens refilled since: the lease goes
// back to Redis, one message. Either way nothing is held after, and the
// key goes from memory.
func TestIdleKeyLetsGoOnlyARefilledBucket(t *testing.T) {
	rdb := redistest.Standalone(t)
	for _, c := range []struct {
		limit    hybridlimit.Limit
		cost     int64
		refilled bool
	}{
		{hybridlimit.PerSecond(1000), 1, true},
		{hybridlimit.Limit{Rate: 20, Period: time.Second, Burst: 1000}, 990, false},
	} {
		clk := clock.New(time.Now())
		l := clocked(t, rdb, clk, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithSyncInterval(100*time.Millisecond, 0))
		ctx := context.Background()
		if r, err := l.AllowN(ctx, "k", c.limit, c.cost); err != nil || !r.Allowed || r.Source != hybridlimit.SourceGlobal {
			t.Fatalf("%v: first decision = %+v, %v", c.limit, r, err)
		}
		// The first round after the decision sees its consumption (the key
		// in use until then), and tops the lease up to what that demand
		// wants; the key is idle from there.
		clk.Advance(10 * time.Second)
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		before := l.Stats()
		if before.Outstanding <= 0 {
			t.Fatalf("%v: nothing held after the first round", c.limit)
		}
		for range 3 { // 30 s: past the idle hold (10 s) and twice it
			clk.Advance(10 * time.Second)
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		s := l.Stats()
		var msgs, dropped uint64 = 1, 0 // the hand-back
		if c.refilled {
			msgs, dropped = 0, uint64(before.Outstanding)
		}
		if s.Messages-before.Messages != msgs || s.Dropped != dropped || s.Outstanding != 0 || s.Keys != 0 || s.Admitted != uint64(c.cost) {
			t.Errorf("%v, holding %d, idle 30 s: %d messages, %d dropped, %d held, %d keys, %d admitted; want %d, %d, 0, 0, %d",
				c.limit, before.Outstanding, s.Messages-before.Messages, s.Dropped, s.Outstanding, s.Keys, s.Admitted, msgs, dropped, c.cost)
		}
	}
}

// TestCallerTimeBeforeStart decides at times before the limiter was made:
// a fresh key was denied for the whole gap without asking Redis, and a
// split key's first decision indexed its parts out of range (a panic).
func TestCallerTimeBeforeStart(t *testing.T) {
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithInstanceID("i0"),
		hlsync.WithSplitKeys(func(key string, _ hybridlimit.Limit) int {
			if strings.HasPrefix(key, "split") {
				return 16
			}
			return 1
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	ctx := context.Background()
	for _, key := range []string{"fresh", "split-a", "split-b", "split-c", "split-d", "split-e", "split-f"} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("AllowNAt(%q) an hour back panicked: %v", key, p)
				}
			}()
			r, err := l.AllowNAt(ctx, time.Now().Add(-time.Hour), key, hybridlimit.PerSecond(1000), 1)
			if err != nil || !r.Allowed {
				t.Errorf("first decision on %q an hour back = %+v, %v; want allowed", key, r, err)
			}
		}()
	}
	if s := l.Stats(); s.DeniedRemote != 0 {
		t.Errorf("DeniedRemote = %d: Redis never said a bucket is empty", s.DeniedRemote)
	}
}

// TestPartKeysOfNoPart asks for the keys of parts that cannot exist: a
// shard count of 0 divided by zero, a panic.
func TestPartKeysOfNoPart(t *testing.T) {
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range [][3]int{{0, 0, 0}, {-1, 4, 0}, {4, 4, 0}, {0, 65, 0}, {0, 2, -1}} {
		if b, a := l.PartKeys("k", in[0], in[1], in[2]); b != "" || a != "" {
			t.Errorf("PartKeys(k, %d, %d, %d) = %q, %q; want no names", in[0], in[1], in[2], b, a)
		}
	}
	if b, a := l.PartKeys("k", 3, 4, 2); b == "" || a == "" || b == a {
		t.Errorf("PartKeys(k, 3, 4, 2) = %q, %q", b, a)
	}
}
