package scripts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/lua"
)

var topologies = redistest.Topologies

// TestHeaders checks every script opens with the header the style asks
// for: its name, its KEYS and ARGV, and its reply.
func TestHeaders(t *testing.T) {
	for _, s := range All() {
		src, err := lua.File(s.Name() + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(src, "-- "+s.Name()+".lua: ") {
			t.Errorf("%s.lua does not open with its name", s.Name())
		}
		header, _, _ := strings.Cut(src, "\n\n"+"local ")
		for _, want := range []string{"-- KEYS[1] ", "-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME", "-- Reply: {"} {
			if !strings.Contains(header, want) {
				t.Errorf("%s.lua header lacks %q", s.Name(), want)
			}
		}
	}
}

// TestScriptsCompile loads every script into a real server, which compiles
// it, and checks the server's SHA1 is the one EVALSHA will send.
func TestScriptsCompile(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	for _, s := range All() {
		if !strings.HasSuffix(s.Source(), mustFile(t, s.Name()+".lua")) {
			t.Errorf("%s: Source() does not end with the file", s.Name())
		}
		sha, err := c.ScriptLoad(t.Context(), s.Source()).Result()
		if err != nil {
			t.Errorf("%s: SCRIPT LOAD: %v", s.Name(), err)
		} else if sha != s.Hash() {
			t.Errorf("%s: server SHA1 %s, Hash() %s", s.Name(), sha, s.Hash())
		}
	}
}

// TestScriptsHaveTheirHelpers checks that each script is built from the
// shared files defining every helper its body calls, and from no file it
// does not use: a missing helper would fail only when the path calling it
// runs, and an unused file costs every run the functions it makes.
func TestScriptsHaveTheirHelpers(t *testing.T) {
	defined := map[string]string{} // helper -> the shared file defining it
	for _, file := range []string{clock, preamble, wide, bucket} {
		for _, m := range regexp.MustCompile(`(?m)^local function (\w+)`).FindAllStringSubmatch(mustFile(t, file+".lua"), -1) {
			defined[m[1]] = file
		}
	}
	for _, s := range append(All(), Sync, Presence, ResetLog, Reshard, Lock, SyncReset) {
		body := mustFile(t, s.Name()+".lua")
		shared := strings.TrimSuffix(s.Source(), body)
		need := map[string]bool{}
		for name, file := range defined {
			if regexp.MustCompile(`\b` + name + `\(`).MatchString(body) {
				need[file] = true
				if !strings.Contains(shared, "local function "+name+"(") {
					t.Errorf("%s calls %s, but is not built from %s.lua", s.Name(), name, file)
				}
			}
		}
		for _, file := range []string{clock, preamble, wide, bucket} {
			if strings.Contains(shared, mustFile(t, file+".lua")) && !need[file] {
				t.Errorf("%s is built from %s.lua, whose helpers it does not call", s.Name(), file)
			}
		}
	}
}

func mustFile(t *testing.T, name string) string {
	t.Helper()
	s, err := lua.File(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIsNoScript(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("NOSCRIPT but not from Redis"), false},
		{redis.ErrNoScript, true},
		{fmt.Errorf("wrapped: %w", redis.ErrNoScript), true},
		{context.Canceled, false},
	} {
		if got := IsNoScript(tt.err); got != tt.want {
			t.Errorf("IsNoScript(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// replyError is an error reply from Redis, as go-redis types them.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// reloads counts the slot-map reloads NoteError asks for.
type reloads struct{ n int }

func (r *reloads) ReloadState(context.Context) { r.n++ }

// TestNoteError checks which failures make a cluster client re-read its
// slot map: those that can mean a dead or demoted node, not the errors
// Redis replies with about the script or the data.
func TestNoteError(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{refused, true},
		{fmt.Errorf("wrapped: %w", refused), true},
		{io.EOF, true},
		{context.DeadlineExceeded, true},
		{context.Canceled, false},
		{replyError("CLUSTERDOWN The cluster is down"), true},
		{replyError("MASTERDOWN Link with MASTER is down"), true},
		{redis.ErrNoScript, false},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), false},
		{replyError("ERR user_script:1: boom"), false},
	} {
		r := &reloads{}
		NoteError(r, tt.err)
		if got := r.n == 1; got != tt.want {
			t.Errorf("NoteError(%v): reloaded %v, want %v", tt.err, got, tt.want)
		}
	}
	NoteError(struct{}{}, io.EOF) // not a cluster client: nothing to do, no panic
}

// TestNoScript empties the script cache, then shows Run recovers while a
// pipelined EvalSha reports NOSCRIPT that IsNoScript recognises.
func TestNoScript(t *testing.T) {
	redistest.NoLeaks(t)
	for _, top := range topologies {
		t.Run(top.Name, func(t *testing.T) {
			c := top.Dial(t)
			key := redistest.Prefix(t) + "{k}:fw"
			args, err := Params{PeriodUS: 60e6, Burst: 10, Cost: 1}.WindowArgs()
			if err != nil {
				t.Fatal(err)
			}
			flush(t, c)
			if _, err := FixedWindow.Run(t.Context(), c, []string{key}, args...); err != nil {
				t.Fatalf("Run after SCRIPT FLUSH: %v", err)
			}
			flush(t, c)
			pipe := c.Pipeline()
			cmd := FixedWindow.EvalSha(t.Context(), pipe, []string{key}, args...)
			_, _ = pipe.Exec(t.Context())
			if !IsNoScript(cmd.Err()) {
				t.Fatalf("pipelined EvalSha after SCRIPT FLUSH: %v, want NOSCRIPT", cmd.Err())
			}
			pipe = c.Pipeline()
			cmd = FixedWindow.Eval(t.Context(), pipe, []string{key}, args...)
			if _, err := pipe.Exec(t.Context()); err != nil {
				t.Fatalf("pipelined Eval: %v", err)
			}
			pipe = c.Pipeline()
			cmd = FixedWindow.EvalSha(t.Context(), pipe, []string{key}, args...)
			if _, err := pipe.Exec(t.Context()); err != nil {
				t.Fatalf("pipelined EvalSha once Eval cached the script: %v", err)
			}
			d, err := DecodeDecision(cmd.Val())
			if err != nil || !d.Allowed || d.Remaining != 7 {
				t.Errorf("third decision = %+v, %v; want allowed, 7 remaining", d, err)
			}
		})
	}
}

func flush(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(t.Context(), func(ctx context.Context, n *redis.Client) error {
			return n.ScriptFlush(ctx).Err()
		})
	} else {
		err = c.ScriptFlush(t.Context()).Err()
	}
	if err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

// TestRedisTime checks a script left to its own clock uses Redis TIME, in
// microseconds.
func TestRedisTime(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	key := redistest.Prefix(t) + "{k}:tb"
	args, err := Params{Rate: 1, PeriodUS: 60e6, Burst: 2, Cost: 1}.TokenBucketArgs()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TokenBucket.Run(t.Context(), c, []string{key}, args...); err != nil {
		t.Fatal(err)
	}
	ts, err := c.HGet(t.Context(), key, "ts").Int64()
	if err != nil {
		t.Fatal(err)
	}
	now, err := c.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := now.Sub(time.UnixMicro(ts)); d < 0 || d > 5*time.Second {
		t.Errorf("stored ts %v is %v before Redis TIME %v", time.UnixMicro(ts), d, now)
	}
	if ttl := c.PTTL(t.Context(), key).Val(); ttl <= 0 || ttl > 60*time.Second+time.Millisecond {
		t.Errorf("PTTL = %v, want the 60s until the bucket is full", ttl)
	}
}

// TestMiniredis runs every script once on miniredis (gopher-lua, used by
// the simulator) to show it needs nothing that only real Redis has.
func TestMiniredis(t *testing.T) {
	redistest.NoLeaks(t)
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	p := Params{Now: now, Rate: 3, PeriodUS: 1e6, Burst: 3, Cost: 2}
	tb, _ := p.TokenBucketArgs()
	gcra, _ := p.GCRAArgs()
	win, _ := p.WindowArgs()
	acq, _ := ConcurrencyArgs(now, 1, 1e6, "lease-1", false)
	acq2, _ := ConcurrencyArgs(now, 1, 1e6, "lease-2", false) // the same id again would be a retry, granted
	rel, _ := ReleaseArgs(now, "lease-1")
	for _, run := range []struct {
		s    *Script
		keys []string
		args []any
		n    int
		next []any // the second run's arguments, if not args
	}{
		{TokenBucket, []string{"{k}:tb"}, tb, 4, nil},
		{GCRA, []string{"{k}:gcra"}, gcra, 4, nil},
		{FixedWindow, []string{"{k}:fw"}, win, 4, nil},
		{SlidingWindow, []string{"{k}:sw"}, win, 4, nil},
		{SlidingLog, []string{"{k}:sl", "{k}:sl.meta"}, win, 4, nil},
		{ConcurrencyAcquire, []string{"{k}:cc"}, acq, 4, acq2},
		{ConcurrencyRelease, []string{"{k}:cc"}, rel, 2, nil},
	} {
		for i := range 2 {
			args := run.args
			if i == 1 && run.next != nil {
				args = run.next
			}
			reply, err := run.s.Run(t.Context(), c, run.keys, args...)
			if err != nil {
				t.Fatalf("%s #%d: %v", run.s.Name(), i, err)
			}
			v, err := DecodeInts(reply, run.n)
			if err != nil {
				t.Fatalf("%s #%d: %v", run.s.Name(), i, err)
			}
			// Cost 2 of 3 passes once, not twice; the lease is taken once and
			// released once.
			if want := int64(1 - i); v[0] != want {
				t.Errorf("%s #%d: reply %v, want allowed %d", run.s.Name(), i, v, want)
			}
		}
		for _, k := range run.keys {
			if mr.Exists(k) && mr.TTL(k) <= 0 {
				t.Errorf("%s: key %s has no TTL", run.s.Name(), k)
			}
		}
	}
}
