package sync_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestRoundHistograms drives a limiter without its loop, so every round is
// known: three fetches of one key each, then the final round of Close,
// which hands back the three leases in one round.
func TestRoundHistograms(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	// Generous timeouts: the test counts rounds, and a round cut short on
	// a loaded machine would be repeated.
	l, err := hlsync.New(rdb, hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithMaxWait(2*time.Second), hlsync.WithRoundTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"a", "b", "c"} {
		if r, err := l.Allow(ctx, key, hybridlimit.PerSecond(1000)); err != nil || !r.Allowed || r.Source != hybridlimit.SourceGlobal {
			t.Fatalf("Allow(%q) = %+v, %v; want allowed after a fetch", key, r, err)
		}
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if s.Rounds != 0 || s.Fetches != 3 || s.Messages != 6 {
		t.Fatalf("Stats = %+v, want 0 rounds, 3 fetches, 6 messages", s)
	}
	msgs := s.RoundMessages
	// Bounds 1, 4, 16, ...: three rounds of 1 message, one of 3.
	if want := []uint64{3, 4, 4, 4, 4, 4, 4, 4, 4}; !slices.Equal(msgs.Buckets, want) || msgs.Count != 4 || msgs.Sum != 6 {
		t.Errorf("RoundMessages = %+v, want buckets %v, count 4, sum 6", msgs, want)
	}
	if len(msgs.Bounds) != len(msgs.Buckets) || msgs.Bounds[0] != 1 {
		t.Errorf("RoundMessages bounds = %v", msgs.Bounds)
	}
	d := s.RoundDuration
	if d.Count != 4 || d.Sum <= 0 || len(d.Bounds) != len(d.Buckets) || !slices.IsSorted(d.Buckets) || d.Buckets[len(d.Buckets)-1] > d.Count {
		t.Errorf("RoundDuration = %+v, want 4 rounds of some duration, cumulative buckets", d)
	}
	// A round on loopback takes well under a second.
	if i := slices.Index(d.Bounds, 1); i < 0 || d.Buckets[i] != 4 {
		t.Errorf("RoundDuration = %+v, want all 4 rounds under 1s", d)
	}
	if s.Errors != [hybridlimit.NumErrorClasses]uint64{} {
		t.Errorf("Errors = %v, want none", s.Errors)
	}
}

// TestErrorsByClass makes Redis answer the sync and presence scripts with
// an error (WRONGTYPE: their keys hold lists) and checks that the failed
// calls count as error replies, and that the decision whose fetch failed
// is the failure policy's, not a denial of the limit's.
func TestErrorsByClass(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	l, err := hlsync.New(rdb, hlsync.WithPrefix(p), hlsync.WithMaxWait(2*time.Second), hlsync.WithRoundTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	ctx := context.Background()
	ks, err := hybridlimit.NewKeyspace(p)
	if err != nil {
		t.Fatal(err)
	}
	bucket, allow := l.Keys("k")
	for _, key := range []string{bucket, allow, ks.Tagged("presence", "instances")} {
		if err := rdb.RPush(ctx, key, "not", "a", "bucket").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Expire(ctx, key, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Announce(ctx); err == nil {
		t.Fatal("Announce with no memory to write succeeded")
	}
	r, err := l.Allow(ctx, "k", hybridlimit.PerSecond(10))
	if err != nil || r.Source != hybridlimit.SourceFallback {
		t.Errorf("Allow with its fetch failing = %+v, %v; want the failure policy's decision", r, err)
	}
	s := l.Stats()
	want := [hybridlimit.NumErrorClasses]uint64{}
	want[hybridlimit.ErrorReply] = 1 + s.Fetches // the presence call, and the one script call of each fetch
	if s.Fetches == 0 || s.Errors != want {
		t.Errorf("Errors = %v after %d fetches, want %v", s.Errors, s.Fetches, want)
	}
	// One decision waited, for one fetch.
	if s.Waits != 1 || s.Fetches != 1 {
		t.Errorf("Waits = %d, Fetches = %d after one decision whose fetch failed, want 1 and 1", s.Waits, s.Fetches)
	}
	if s.RoundDuration.Count != s.Fetches || s.RoundMessages.Count != s.Fetches {
		t.Errorf("RoundDuration = %+v, RoundMessages = %+v, want one count per fetch (%d)", s.RoundDuration, s.RoundMessages, s.Fetches)
	}
}

// TestAdmittedNeverGoesDown reads Stats while a round evicts 3,000 idle
// keys: an evicted entry left its table before its count reached the
// evicted total, and a Stats between the two steps missed it, so
// Admitted, a counter, went down (3,000 -> 2,994).
func TestAdmittedNeverGoesDown(t *testing.T) {
	defaultBuildOnly(t)
	rdb := redistest.Standalone(t)
	ctx := context.Background()
	for range 5 {
		clk := clock.New(time.Now())
		// A round of 3,000 keys, racing a goroutine that reads Stats
		// without a pause, under -race on two loaded cores, can outlast
		// the default round timeout; the test is about Stats, not speed.
		l, err := hlsync.New(rdb, hlsync.WithClock(clk), hlsync.WithPrefix(redistest.Prefix(t)), hlsync.WithRoundTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		const keys = 3000
		for i := range keys {
			if r, err := l.Allow(ctx, fmt.Sprint("k", i), hybridlimit.PerSecond(1000)); err != nil || !r.Allowed {
				t.Fatalf("Allow = %+v, %v", r, err)
			}
		}
		for range 3 { // everything reported
			clk.Advance(time.Second)
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			prev := l.Stats().Admitted
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := l.Stats().Admitted
				if a < prev {
					t.Errorf("Stats.Admitted went down: %d -> %d", prev, a)
				}
				prev = max(prev, a)
			}
		}()
		clk.Advance(time.Minute) // every key idle: the rounds evict them
		for range 5 {
			clk.Advance(5 * time.Second)
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		<-done
		s := l.Stats()
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if s.Admitted != keys || s.Evictions == 0 {
			t.Fatalf("after the evictions: %d admitted, %d evictions; want %d and some", s.Admitted, s.Evictions, keys)
		}
		if t.Failed() {
			return
		}
	}
}
