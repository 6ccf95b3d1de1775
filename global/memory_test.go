package global

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestMaxMemoryNoEviction documents what a caller sees when Redis is out
// of memory under the noeviction policy. Redis 7 checks memory at a
// script's first write command, and refuses it with "OOM command not
// allowed when used memory > 'maxmemory'" before anything is written: Allow
// returns an error wrapping hybridlimit.ErrUnavailable whose text carries
// the OOM reply, nothing is admitted and nothing half-written. Peek, which
// writes nothing, still answers. Decisions work again once memory is free.
func TestMaxMemoryNoEviction(t *testing.T) {
	redistest.NoLeaks(t)
	s := redistest.Start(t, "maxmemory-policy noeviction")
	c := s.Client(t)
	p := redistest.Prefix(t)
	limit := hybridlimit.PerMinute(10)
	for _, alg := range algorithms {
		l, err := New(c, alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Allow(t.Context(), "k", limit); err != nil {
			t.Fatalf("%v: Allow before the limit: %v", alg, err)
		}
		// Any used memory is above one byte.
		if err := c.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		_, err = l.Allow(t.Context(), "k", limit)
		if !errors.Is(err, hybridlimit.ErrUnavailable) || !strings.Contains(err.Error(), "OOM") ||
			!strings.HasPrefix(err.Error(), "global: "+alg.String()+": ") {
			t.Errorf("%v: Allow out of memory: %v, want an error wrapping ErrUnavailable with the OOM reply", alg, err)
		} else if alg == GCRA {
			t.Logf("Allow out of memory: %v", err)
		}
		if r, err := l.Peek(t.Context(), "k", limit); err != nil || r.Remaining != 9 {
			t.Errorf("%v: Peek out of memory = %+v, %v; want 9 remaining", alg, r, err)
		}
		if err := c.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if r, err := l.Allow(t.Context(), "k", limit); err != nil || !r.Allowed || r.Remaining != 8 {
			t.Errorf("%v: Allow with memory again = %+v, %v; want allowed, 8 remaining", alg, r, err)
		}
	}
	if n := s.ErrorReplies(t, "OOM"); n != int64(len(algorithms)) {
		t.Errorf("%d OOM replies, want %d", n, len(algorithms))
	}
}

// TestMaxMemoryEviction documents what eviction (allkeys-lru) does to a
// limit: the emptied bucket's key is evicted like any other, and an evicted
// bucket looks full, so the key admits one more burst. That is the bound:
// one burst per eviction of the key.
func TestMaxMemoryEviction(t *testing.T) {
	redistest.NoLeaks(t)
	s := redistest.Start(t, "maxmemory-policy allkeys-lru")
	c := s.Client(t)
	p := redistest.Prefix(t)
	const burst = 10
	limit := hybridlimit.PerHour(burst)
	for _, alg := range algorithms {
		l, err := New(c, alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		for i := range burst {
			if r, err := l.Allow(t.Context(), "k", limit); err != nil || !r.Allowed {
				t.Fatalf("%v: Allow #%d = %+v, %v", alg, i, r, err)
			}
		}
		if r, err := l.Allow(t.Context(), "k", limit); err != nil || r.Allowed {
			t.Fatalf("%v: Allow past the burst = %+v, %v; want denied", alg, r, err)
		}
	}
	s.EvictAll(t, p)
	for _, alg := range algorithms {
		l, err := New(c, alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for range 2 * burst {
			r, err := l.Allow(t.Context(), "k", limit)
			if err != nil {
				t.Fatalf("%v: Allow after eviction: %v", alg, err)
			}
			if r.Allowed {
				admitted++
			}
		}
		t.Logf("%v: %d admitted after the key was evicted (burst %d)", alg, admitted, burst)
		if admitted != burst {
			t.Errorf("%v: %d admitted after eviction, want a full burst of %d (an evicted bucket looks full)", alg, admitted, burst)
		}
	}
}

// keyspace returns the keys and the keys with a TTL in db 0, from INFO
// keyspace: equal counts prove that no key lacks a TTL, at any size.
func keyspace(t *testing.T, c *redis.Client) (keys, expires int64) {
	t.Helper()
	info, err := c.Info(t.Context(), "keyspace").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "db0:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			name, n, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseInt(n, 10, 64)
			switch name {
			case "keys":
				keys = x
			case "expires":
				expires = x
			}
		}
	}
	return keys, expires
}

// TestManyIdentities sends manyIdentities distinct keys through GCRA and
// FixedWindow with a one-second limit on a private server, checking all the
// while that every key has a TTL (INFO keyspace: keys == expires), then
// that once the windows have passed every key is gone: DBSIZE is back to
// its baseline of 0, without any cleanup by the test.
func TestManyIdentities(t *testing.T) {
	redistest.NoLeaks(t)
	// Under the race detector on two shared cores the client, not Redis,
	// is the bottleneck: 4,500-11,700 decisions/s, so 50,000 identities
	// take 4-11s. HYBRIDLIMIT_IDENTITIES sets another count, such as a
	// million for a run without -race.
	manyIdentities := int64(50_000)
	if n, err := strconv.ParseInt(os.Getenv("HYBRIDLIMIT_IDENTITIES"), 10, 64); err == nil && n > 0 {
		manyIdentities = n
	}
	// hz 100: expire the dead keys ten times as often as the default, so
	// the test need not wait long for the last of them.
	s := redistest.Start(t, "hz 100")
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 64})
	t.Cleanup(func() { _ = c.Close() })
	p := redistest.Prefix(t)
	limit := hybridlimit.PerSecond(1)
	var ls []*Limiter
	for _, alg := range []Algorithm{GCRA, FixedWindow} {
		l, err := New(c, alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	start := time.Now()
	var next, denied, noTTLSeen atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if keys, expires := keyspace(t, c); keys != expires {
				noTTLSeen.Add(1)
			}
		}
	}()
	g, ctx := errgroup.WithContext(context.Background())
	for range 32 {
		g.Go(func() error {
			for {
				i := next.Add(1)
				if i > manyIdentities {
					return nil
				}
				r, err := ls[i%2].Allow(ctx, "id:"+strconv.FormatInt(i, 10), limit)
				if err != nil {
					return err
				}
				if !r.Allowed {
					denied.Add(1)
				}
			}
		})
	}
	err := g.Wait()
	close(stop)
	<-watched
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Since(start)
	// Keys live about a second: most have expired already.
	keys, expires := keyspace(t, c)
	t.Logf("%d identities in %v (%.0f/s), %d keys left, %d with a TTL", manyIdentities, sent, float64(manyIdentities)/sent.Seconds(), keys, expires)
	if expires != keys || noTTLSeen.Load() != 0 || denied.Load() != 0 {
		t.Errorf("keys %d, with a TTL %d, samples with keys lacking a TTL %d, denied %d (want 0)", keys, expires, noTTLSeen.Load(), denied.Load())
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := c.DBSize(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Logf("every key expired %v after the last decision", time.Since(start)-sent)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DBSIZE %d, 15s after the last decision; want 0", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
