package sync_test

import (
	"context"
	"fmt"
	"log/slog"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// logCount is a slog handler that keeps every record, for tests that
// assert a limiter had nothing to complain about.
type logCount struct {
	mu   stdsync.Mutex
	msgs []string
}

func (h *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCount) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	h.msgs = append(h.msgs, msg)
	return nil
}
func (h *logCount) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCount) WithGroup(string) slog.Handler      { return h }

func (h *logCount) records() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// TestScriptFlushUnderLoad empties the script cache of every node ten
// times while a Reserve and an Optimistic limiter, started, serve 64 keys
// each from four goroutines, on a private standalone server and a private
// cluster. The rounds' pipelined EVALSHA meets NOSCRIPT (INFO errorstats
// proves it) and is sent again with EVAL: no round fails, no fetch fails,
// the breaker never opens, nothing is logged, no decision returns an
// error, and no key lacks a TTL.
func TestScriptFlushUnderLoad(t *testing.T) {
	defaultBuildOnly(t)
	redistest.NoLeaks(t)
	for _, top := range []struct {
		name  string
		start func(t *testing.T) (func() redis.UniversalClient, []*redistest.Server)
	}{
		{"standalone", func(t *testing.T) (func() redis.UniversalClient, []*redistest.Server) {
			s := redistest.Start(t)
			return func() redis.UniversalClient { return s.Client(t) }, []*redistest.Server{s}
		}},
		{"cluster", func(t *testing.T) (func() redis.UniversalClient, []*redistest.Server) {
			cl := redistest.NewCluster(t)
			return func() redis.UniversalClient { return cl.Client(t) }, cl.Nodes
		}},
	} {
		t.Run(top.name, func(t *testing.T) {
			newClient, nodes := top.start(t)
			p := redistest.Prefix(t)
			logs := &logCount{}
			var ls []*hlsync.Limiter
			for _, mode := range []hlsync.Mode{hlsync.Reserve, hlsync.Optimistic} {
				l, err := hlsync.New(newClient(), hlsync.WithPrefix(p), hlsync.WithMode(mode),
					hlsync.WithSyncInterval(20*time.Millisecond, 0.1), hlsync.WithFailurePolicy(hybridlimit.FailClosed),
					// A slow moment of a loaded test machine is not the
					// fault under test.
					hlsync.WithRoundTimeout(time.Second), hlsync.WithMaxWait(time.Second),
					hlsync.WithLogger(slog.New(logs)))
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close(context.Background()) })
				ls = append(ls, l)
			}
			noscript := func() int64 { return redistest.ErrorRepliesOf(t, "NOSCRIPT", nodes) }
			before := noscript()
			limit := hybridlimit.PerSecond(2000)
			var next atomic.Int64
			load := redistest.StartLoad(4, func(ctx context.Context) (bool, error) {
				i := next.Add(1)
				l := ls[i%2]
				r, err := l.Allow(ctx, fmt.Sprintf("%v:k%d", l.Mode(), i%64), limit)
				time.Sleep(100 * time.Microsecond)
				return r.Allowed, err
			})
			const flushes = 10
			for range flushes {
				time.Sleep(40 * time.Millisecond)
				redistest.FlushScripts(t, nodes...)
			}
			time.Sleep(40 * time.Millisecond)
			res := load.Stop()
			for _, l := range ls {
				if err := l.Close(context.Background()); err != nil {
					t.Errorf("%v: Close: %v", l.Mode(), err)
				}
			}
			n, first, _ := res.Errors()
			admitted, _ := res.Admitted(time.Time{}, time.Time{})
			met := noscript() - before
			t.Logf("%d decisions (%d admitted), %d flushes of %d nodes, %d NOSCRIPT replies", len(res.Decisions), admitted, flushes, len(nodes), met)
			if n > 0 {
				t.Errorf("%d decisions failed, first: %v", n, first)
			}
			if met < flushes {
				t.Errorf("%d NOSCRIPT replies after %d flushes: the fallback was not exercised", met, flushes)
			}
			for _, l := range ls {
				s := l.Stats()
				t.Logf("%v: %d rounds, %d fetches, %d script calls", l.Mode(), s.Rounds, s.Fetches, s.ScriptCalls)
				if s.RoundErrors != 0 || s.BreakerOpens != 0 || s.FailClosed != 0 {
					t.Errorf("%v: RoundErrors = %d, BreakerOpens = %d, FailClosed = %d, want 0", l.Mode(), s.RoundErrors, s.BreakerOpens, s.FailClosed)
				}
			}
			if msgs := logs.records(); len(msgs) > 0 {
				t.Errorf("logged %d records, first %q", len(msgs), msgs[0])
			}
			noTTL, seen := redistest.KeysWithoutTTL(t, newClient(), p)
			if seen == 0 || len(noTTL) > 0 {
				t.Errorf("keys seen %d, without TTL %v", seen, noTTL)
			}
		})
	}
}
