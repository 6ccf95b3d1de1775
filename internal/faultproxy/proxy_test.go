package faultproxy_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/faultproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// setup returns a proxy to the shared Redis server, a client to the server
// directly (to check what really happened) and a key prefix of the test.
func setup(t *testing.T) (p *faultproxy.Proxy, direct *redis.Client, prefix string) {
	t.Helper()
	srv := redistest.StandaloneServer(t)
	return faultproxy.Start(t, srv.Addr), srv.Client(t), redistest.Prefix(t)
}

// client returns a go-redis client through p, closed when the test ends.
// maxRetries follows go-redis: 0 is its default of 3 retries, -1 is none.
func client(t *testing.T, p *faultproxy.Proxy, maxRetries int, readTimeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:        p.Addr(),
		MaxRetries:  maxRetries,
		ReadTimeout: readTimeout,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// get returns the integer at key on the server, read directly.
func get(t *testing.T, direct *redis.Client, key string) int64 {
	t.Helper()
	n, err := direct.Get(context.Background(), key).Int64()
	if err != nil {
		t.Fatalf("GET %s directly: %v", key, err)
	}
	return n
}

// settled returns the integer at key once it reaches at least want, or
// after 5 s. A client that timed out cannot have waited for its command to
// run, so tests poll for the server value instead of reading it once.
func settled(t *testing.T, direct *redis.Client, key string, want int64) int64 {
	t.Helper()
	var n int64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if n, _ = direct.Get(context.Background(), key).Int64(); n >= want {
			break
		}
	}
	return n
}

// warm makes c open its connection (and run the go-redis handshake) now.
func warm(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func TestPassthrough(t *testing.T) {
	t.Parallel()
	for _, protocol := range []int{2, 3} {
		t.Run("RESP"+strconv.Itoa(protocol), func(t *testing.T) {
			t.Parallel()
			testPassthrough(t, protocol)
		})
	}
}

func testPassthrough(t *testing.T, protocol int) {
	p, direct, prefix := setup(t)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), Protocol: protocol})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	t.Cleanup(func() { direct.Del(ctx, prefix+"k", prefix+"n", prefix+"h", prefix+"big") })

	if err := c.Set(ctx, prefix+"k", "v", time.Minute).Err(); err != nil {
		t.Fatalf("SET = %v", err)
	}
	if got, err := c.Get(ctx, prefix+"k").Result(); got != "v" || err != nil {
		t.Fatalf("GET = %q, %v, want v, nil", got, err)
	}
	if got, err := c.Get(ctx, prefix+"missing").Result(); err != redis.Nil {
		t.Fatalf("GET missing = %q, %v, want redis.Nil", got, err)
	}
	// A map in RESP3, a flat array in RESP2.
	if err := c.HSet(ctx, prefix+"h", "a", "1", "b", "2").Err(); err != nil {
		t.Fatalf("HSET = %v", err)
	}
	if got, err := c.HGetAll(ctx, prefix+"h").Result(); len(got) != 2 || got["b"] != "2" || err != nil {
		t.Fatalf("HGETALL = %v, %v, want a:1 b:2", got, err)
	}
	// Nested arrays with a nil inside, from a script.
	got, err := c.Eval(ctx, "return {1, {2, false, 'x'}, redis.call('TIME')}", nil).Slice()
	if err != nil || len(got) != 3 {
		t.Fatalf("EVAL = %v, %v, want 3 elements", got, err)
	}

	cmds, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range 100 {
			pipe.IncrBy(ctx, prefix+"n", int64(i))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pipeline of 100 = %v", err)
	}
	sum := int64(0)
	for i, cmd := range cmds {
		sum += int64(i)
		if got := cmd.(*redis.IntCmd).Val(); got != sum {
			t.Fatalf("pipeline reply %d = %d, want %d", i, got, sum)
		}
	}
	if got := get(t, direct, prefix+"n"); got != sum {
		t.Errorf("server value = %d, want %d", got, sum)
	}
	// A big value crosses many reads and writes in both directions.
	big := string(make([]byte, 1<<20))
	if err := c.Set(ctx, prefix+"big", big, time.Minute).Err(); err != nil {
		t.Fatalf("SET 1 MiB = %v", err)
	}
	if got, err := c.Get(ctx, prefix+"big").Result(); got != big || err != nil {
		t.Fatalf("GET 1 MiB = %d bytes, %v, want %d bytes", len(got), err, len(big))
	}

	// go-redis runs pipelines on a pool of their own: two connections.
	s := p.Stats()
	if s.Conns < 1 || s.Open != s.Conns || s.Commands < 109 || s.Replies != s.Commands ||
		s.Dropped != 0 || s.Duplicated != 0 || s.Refused != 0 || s.DialErrors != 0 {
		t.Errorf("Stats() = %+v, want every connection open, >= 109 commands each with its reply, no faults", s)
	}
}

func TestDuplicateRequests(t *testing.T) {
	t.Parallel()
	p, direct, prefix := setup(t)
	c := client(t, p, 0, 0)
	ctx := context.Background()
	key := prefix + "n"
	t.Cleanup(func() { direct.Del(ctx, key) })

	p.DuplicateRequests(1) // before the pool has a connection: the handshake is spared
	if got, err := c.Incr(ctx, key).Result(); got != 1 || err != nil {
		t.Fatalf("INCR = %d, %v, want 1, nil (the first reply)", got, err)
	}
	if got := get(t, direct, key); got != 2 {
		t.Errorf("server value = %d, want 2 (the command ran twice)", got)
	}
	if got, err := c.Incr(ctx, key).Result(); got != 3 || err != nil {
		t.Errorf("next INCR = %d, %v, want 3, nil (the count was used up)", got, err)
	}
	if s := p.Stats(); s.Duplicated != 1 {
		t.Errorf("Stats().Duplicated = %d, want 1", s.Duplicated)
	}
}

// TestDuplicateInPipeline duplicates one command in the middle of a
// pipeline: the replies around it stay in step.
func TestDuplicateInPipeline(t *testing.T) {
	t.Parallel()
	p, direct, prefix := setup(t)
	c := client(t, p, 0, 0)
	ctx := context.Background()
	warm(t, c)
	t.Cleanup(func() { direct.Del(ctx, prefix+"a", prefix+"b", prefix+"c") })

	p.TargetCommands("DECR")
	p.DuplicateRequests(1)
	var a, b, cc *redis.IntCmd
	_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		a = pipe.Incr(ctx, prefix+"a")
		b = pipe.Decr(ctx, prefix+"b")
		cc = pipe.IncrBy(ctx, prefix+"c", 10)
		return nil
	})
	if err != nil || a.Val() != 1 || b.Val() != -1 || cc.Val() != 10 {
		t.Fatalf("pipeline = %d, %d, %d, %v, want 1, -1, 10, nil", a.Val(), b.Val(), cc.Val(), err)
	}
	for key, want := range map[string]int64{"a": 1, "b": -2, "c": 10} {
		if got := get(t, direct, prefix+key); got != want {
			t.Errorf("server value of %s = %d, want %d", key, got, want)
		}
	}
}

func TestDropRepliesWithoutRetry(t *testing.T) {
	t.Parallel()
	p, direct, prefix := setup(t)
	c := client(t, p, -1, 0) // -1, not 0, disables go-redis retries
	ctx := context.Background()
	key := prefix + "n"
	t.Cleanup(func() { direct.Del(ctx, key) })

	p.DropReplies(1)
	if got, err := c.Incr(ctx, key).Result(); err == nil {
		t.Fatalf("INCR = %d, nil, want a network error", got)
	}
	if got := get(t, direct, key); got != 1 {
		t.Errorf("server value = %d, want 1 (the command ran, its reply was lost)", got)
	}
	if got, err := c.Incr(ctx, key).Result(); got != 2 || err != nil {
		t.Errorf("next INCR = %d, %v, want 2, nil (a new connection, no fault left)", got, err)
	}
	if s := p.Stats(); s.Dropped != 1 || s.Conns != 2 {
		t.Errorf("Stats() = %+v, want 1 dropped and 2 connections", s)
	}
}

// TestDropRepliesWithRetry shows what a limiter's Redis sync must survive:
// by default go-redis retries a command whose reply was lost, and the
// command runs twice.
func TestDropRepliesWithRetry(t *testing.T) {
	t.Parallel()
	p, direct, prefix := setup(t)
	c := client(t, p, 0, 0) // go-redis default: 3 retries
	ctx := context.Background()
	key := prefix + "n"
	t.Cleanup(func() { direct.Del(ctx, key) })

	p.DropReplies(1)
	if got, err := c.Incr(ctx, key).Result(); got != 2 || err != nil {
		t.Fatalf("INCR = %d, %v, want 2, nil (retried, and ran twice)", got, err)
	}
	if got := get(t, direct, key); got != 2 {
		t.Errorf("server value = %d, want 2", got)
	}
}

// TestDropInPipeline drops the reply to one command in the middle of a
// pipeline: the commands before it ran, and the whole pipeline fails.
func TestDropInPipeline(t *testing.T) {
	t.Parallel()
	p, direct, prefix := setup(t)
	c := client(t, p, -1, 0)
	ctx := context.Background()
	warm(t, c)
	t.Cleanup(func() { direct.Del(ctx, prefix+"a", prefix+"b", prefix+"c") })

	p.TargetCommands("DECR")
	p.DropReplies(1)
	_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Incr(ctx, prefix+"a")
		pipe.Decr(ctx, prefix+"b")
		pipe.Incr(ctx, prefix+"c")
		return nil
	})
	if err == nil {
		t.Fatal("pipeline = nil, want a network error")
	}
	if a, b := get(t, direct, prefix+"a"), get(t, direct, prefix+"b"); a != 1 || b != -1 {
		t.Errorf("server values a, b = %d, %d, want 1, -1 (both ran)", a, b)
	}
	// c was forwarded too and may or may not have run: the connection was
	// cut with its reply unread.
}

func TestTargetCommands(t *testing.T) {
	t.Parallel()
	p, direct, prefix := setup(t)
	c := client(t, p, -1, 0)
	ctx := context.Background()
	key := prefix + "n"
	t.Cleanup(func() { direct.Del(ctx, key) })

	p.TargetCommands("incr")
	p.DropReplies(1)
	for range 3 {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING = %v, want nil (not targeted)", err)
		}
	}
	if err := c.Incr(ctx, key).Err(); err == nil {
		t.Fatal("INCR = nil, want a network error")
	}
	p.TargetCommands()
	p.DropReplies(-1) // every command from now on, the handshake excepted
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING = nil, want a network error")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("second PING = nil, want a network error")
	}
	p.DropReplies(0)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after DropReplies(0) = %v", err)
	}
	if s := p.Stats(); s.Dropped != 3 {
		t.Errorf("Stats().Dropped = %d, want 3", s.Dropped)
	}
}

func TestDelay(t *testing.T) {
	t.Parallel()
	p, _, _ := setup(t)
	c := client(t, p, 0, 0)
	ctx := context.Background()
	warm(t, c)

	const d = 100 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING = %v", err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("PING took %v, want >= %v", took, d)
	}

	// Replies that arrive together leave together: a pipeline of 50 takes
	// about d, not 50·d.
	start = time.Now()
	_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for range 50 {
			pipe.Ping(ctx)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pipeline = %v", err)
	}
	if took := time.Since(start); took < d || took > 25*d {
		t.Errorf("pipeline of 50 took %v, want between %v and %v (one by one, 50 would take %v)", took, d, 25*d, 50*d)
	}

	// Delay(0) lifts the delay: under the 10 s one set before it, a PING
	// would take 10 s; without, far less however loaded the machine.
	const long = 10 * time.Second
	p.Delay(long)
	p.Delay(0)
	start = time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING = %v", err)
	}
	if took := time.Since(start); took >= long/2 {
		t.Errorf("PING after Delay(0) took %v, want well under %v", took, long)
	}
}

func TestStallResume(t *testing.T) {
	t.Parallel()
	p, direct, prefix := setup(t)
	c := client(t, p, -1, 0)
	ctx := context.Background()
	key := prefix + "n"
	t.Cleanup(func() { direct.Del(ctx, key) })
	warm(t, c)

	p.Stall()
	p.Stall() // twice is once
	before := p.Stats().Commands
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := c.Incr(ctx, key).Result()
		done <- result{n, err}
	}()
	// The command reaches Redis and runs; only its reply is held.
	eventually(t, "the INCR was forwarded", func() bool { return p.Stats().Commands > before })
	eventually(t, "the INCR ran", func() bool { n, _ := direct.Get(ctx, key).Int64(); return n == 1 })
	select {
	case r := <-done:
		t.Fatalf("INCR returned %d, %v while stalled", r.n, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	p.Resume()
	p.Resume() // twice is once
	if r := <-done; r.n != 1 || r.err != nil {
		t.Fatalf("INCR after Resume = %d, %v, want 1, nil", r.n, r.err)
	}
	if got := get(t, direct, key); got != 1 {
		t.Errorf("server value = %d, want 1", got)
	}
}

// TestStallTimeout is "a timeout after the script ran": the client times
// out, yet the command ran. Without retries it ran once.
func TestStallTimeout(t *testing.T) {
	t.Parallel()
	p, direct, prefix := setup(t)
	c := client(t, p, -1, 200*time.Millisecond)
	ctx := context.Background()
	key := prefix + "n"
	t.Cleanup(func() { direct.Del(ctx, key) })
	warm(t, c)

	p.Stall()
	defer p.Resume()
	err := c.Incr(ctx, key).Err()
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("INCR = %v, want a timeout", err)
	}
	if got := settled(t, direct, key, 1); got != 1 {
		t.Errorf("server value = %d, want 1", got)
	}
}

// TestLateRepliesRetried shows the worse case: go-redis retries a read
// timeout of an ordinary command by default, on a new connection, so a
// command whose replies are all late runs once per attempt (1 + 3 retries)
// and the client still gets an error.
func TestLateRepliesRetried(t *testing.T) {
	t.Parallel()
	p, direct, prefix := setup(t)
	// The read timeout bounds the handshake of each retry too: short enough
	// to keep the test quick, long enough that a loaded machine completes
	// the handshake and every attempt sends the INCR.
	c := client(t, p, 0, 200*time.Millisecond)
	ctx := context.Background()
	key := prefix + "n"
	t.Cleanup(func() { direct.Del(ctx, key) })

	p.TargetCommands("INCR")
	p.LateReplies(-1, time.Minute) // cut short when the client gives up
	if err := c.Incr(ctx, key).Err(); err == nil {
		t.Fatal("INCR = nil, want a timeout")
	}
	if got := settled(t, direct, key, 4); got != 4 {
		t.Errorf("server value = %d, want 4 (one run per attempt)", got)
	}
}

func TestLateReplies(t *testing.T) {
	t.Parallel()
	p, _, _ := setup(t)
	c := client(t, p, 0, 0)
	ctx := context.Background()
	warm(t, c)

	// Late by a second: a PING on time takes far less, however loaded the
	// machine.
	const d = time.Second
	p.LateReplies(1, d)
	for i, want := range []time.Duration{d, 0} { // late once, then on time
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING %d = %v", i, err)
		}
		took := time.Since(start)
		if want > 0 && took < want || want == 0 && took >= d/2 {
			t.Errorf("PING %d took %v, want late by %v", i, took, want)
		}
	}
}

func TestRefuseConnections(t *testing.T) {
	t.Parallel()
	p, _, _ := setup(t)
	c := client(t, p, -1, 0)
	ctx := context.Background()

	p.RefuseConnections(true)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING while refusing = nil, want an error")
	}
	if s := p.Stats(); s.Refused < 1 || s.Conns != 0 {
		t.Errorf("Stats() = %+v, want >= 1 refused, 0 proxied", s)
	}
	p.RefuseConnections(false)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after RefuseConnections(false) = %v", err)
	}
	// Refusing leaves open connections alone.
	p.RefuseConnections(true)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING on an open connection while refusing = %v", err)
	}
}

func TestDisconnect(t *testing.T) {
	t.Parallel()
	p, _, _ := setup(t)
	c := client(t, p, 0, 0)
	ctx := context.Background()
	warm(t, c)

	if n := p.Disconnect(); n != 1 {
		t.Errorf("Disconnect() = %d, want 1", n)
	}
	if s := p.Stats(); s.Open != 0 {
		t.Errorf("Stats().Open after Disconnect = %d, want 0", s.Open)
	}
	if err := c.Ping(ctx).Err(); err != nil { // go-redis notices and redials
		t.Fatalf("PING after Disconnect = %v", err)
	}
	if s := p.Stats(); s.Conns != 2 || s.Open != 1 {
		t.Errorf("Stats() = %+v, want 2 connections, 1 open", s)
	}
}

func TestDialError(t *testing.T) {
	t.Parallel()
	// A port that was free a moment ago: nothing listens there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()

	p := faultproxy.Start(t, addr)
	c := client(t, p, -1, 0)
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Fatal("PING = nil, want an error")
	}
	if s := p.Stats(); s.DialErrors < 1 {
		t.Errorf("Stats().DialErrors = %d, want >= 1", s.DialErrors)
	}
}

// TestCloseEndsGoroutines closes a proxy with connections in every state
// (idle, mid-pipeline, holding a stalled reply) and checks that no goroutine
// of the proxy outlives Close. It is not parallel: goleak sees every
// goroutine of the process.
func TestCloseEndsGoroutines(t *testing.T) {
	srv := redistest.StandaloneServer(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	p, err := faultproxy.Listen(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	idle := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	busy := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	if err := idle.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING = %v", err)
	}
	if err := busy.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING = %v", err)
	}
	p.Delay(time.Millisecond)
	p.Stall()
	before := p.Stats().Commands
	stalled := make(chan error, 1)
	go func() { stalled <- busy.Incr(ctx, prefix+"n").Err() }()
	eventually(t, "the INCR was forwarded", func() bool { return p.Stats().Commands > before })

	if err := p.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	if err := <-stalled; err == nil {
		t.Error("stalled INCR after Close = nil, want a network error")
	}
	if s := p.Stats(); s.Open != 0 {
		t.Errorf("Stats().Open after Close = %d, want 0", s.Open)
	}
	if conn, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_ = conn.Close()
		t.Error("dial after Close = nil, want an error (nothing listening)")
	}
	_ = idle.Close()
	_ = busy.Close()
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	direct.Del(ctx, prefix+"n")
	_ = direct.Close()
}
