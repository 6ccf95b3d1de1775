package global

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestNewRejects(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	var typedNil *redis.Client
	var typedNilCluster *redis.ClusterClient
	tests := []struct {
		name string
		rdb  hybridlimit.Redis
		alg  Algorithm
		opts []Option
		want error
	}{
		{"nil client", nil, GCRA, nil, hybridlimit.ErrNilClient},
		{"typed nil client", typedNil, GCRA, nil, hybridlimit.ErrNilClient},
		{"typed nil cluster client", typedNilCluster, GCRA, nil, hybridlimit.ErrNilClient},
		{"zero algorithm", c, 0, nil, nil},
		{"unknown algorithm", c, SlidingLog + 1, nil, nil},
		{"prefix with a brace", c, GCRA, []Option{WithPrefix("a{b")}, nil},
		{"prefix too long", c, GCRA, []Option{WithPrefix(strings.Repeat("p", 65))}, nil},
	}
	for _, tt := range tests {
		l, err := New(tt.rdb, tt.alg, tt.opts...)
		if err == nil || l != nil {
			t.Errorf("%s: New = %v, %v; want an error", tt.name, l, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "global: ") {
			t.Errorf("%s: error %q lacks the package prefix", tt.name, err)
		}
		if tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("%s: New error %v, want %v", tt.name, err, tt.want)
		}
		if _, err := NewConcurrency(tt.rdb, tt.opts...); tt.alg.valid() && err == nil {
			t.Errorf("%s: NewConcurrency succeeded", tt.name)
		}
	}
	if _, err := New(c, GCRA, nil); err != nil {
		t.Errorf("New with a nil Option: %v", err)
	}
}

func TestZeroLimiter(t *testing.T) {
	var l *Limiter
	if l.Algorithm() != 0 {
		t.Errorf("nil Limiter: Algorithm() = %v", l.Algorithm())
	}
	if _, err := l.Allow(t.Context(), "k", hybridlimit.PerSecond(1)); !errors.Is(err, hybridlimit.ErrNilClient) {
		t.Errorf("nil Limiter: %v, want ErrNilClient", err)
	}
	if _, err := new(Limiter).Allow(t.Context(), "k", hybridlimit.PerSecond(1)); !errors.Is(err, hybridlimit.ErrNilClient) {
		t.Errorf("zero Limiter: %v, want ErrNilClient", err)
	}
	if _, _, err := new(Concurrency).Acquire(t.Context(), "k", ConcurrencyLimit{1, time.Second}); !errors.Is(err, hybridlimit.ErrNilClient) {
		t.Errorf("zero Concurrency: %v, want ErrNilClient", err)
	}
}

// TestBadInput checks that bad limits, costs, keys and times are errors
// that name their cause, on every algorithm, before Redis is asked.
func TestBadInput(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	ok := hybridlimit.PerSecond(10)
	huge := int64(hybridlimit.MaxQuantity) + 1
	tests := []struct {
		name  string
		key   string
		limit hybridlimit.Limit
		cost  int64
		now   time.Time
		want  error
	}{
		{"zero limit", "k", hybridlimit.Limit{}, 1, t0, hybridlimit.ErrInvalidLimit},
		{"negative rate", "k", hybridlimit.Limit{Rate: -1, Period: time.Second, Burst: 1}, 1, t0, hybridlimit.ErrInvalidLimit},
		{"zero burst", "k", hybridlimit.Limit{Rate: 1, Period: time.Second}, 1, t0, hybridlimit.ErrInvalidLimit},
		{"negative period", "k", hybridlimit.Limit{Rate: 1, Period: -time.Second, Burst: 1}, 1, t0, hybridlimit.ErrInvalidLimit},
		{"sub-millisecond period", "k", hybridlimit.Limit{Rate: 1, Period: time.Microsecond, Burst: 1}, 1, t0, hybridlimit.ErrInvalidLimit},
		{"huge burst", "k", hybridlimit.Limit{Rate: 1, Period: time.Second, Burst: huge}, 1, t0, hybridlimit.ErrInvalidLimit},
		{"huge rate", "k", hybridlimit.Limit{Rate: huge, Period: time.Second, Burst: 1}, 1, t0, hybridlimit.ErrInvalidLimit},
		{"refill too slow", "k", hybridlimit.Limit{Rate: 1, Period: time.Hour, Burst: 1 << 20}, 1, t0, hybridlimit.ErrInvalidLimit},
		{"zero cost", "k", ok, 0, t0, hybridlimit.ErrInvalidCost},
		{"negative cost", "k", ok, -5, t0, hybridlimit.ErrInvalidCost},
		{"cost above burst", "k", ok, 11, t0, hybridlimit.ErrCostExceedsBurst},
		{"huge cost", "k", ok, 1 << 62, t0, hybridlimit.ErrCostExceedsBurst},
		{"empty key", "", ok, 1, t0, hybridlimit.ErrInvalidKey},
		{"key too long", strings.Repeat("k", hybridlimit.MaxKeyLen+1), ok, 1, t0, hybridlimit.ErrInvalidKey},
		{"zero time", "k", ok, 1, time.Time{}, ErrInvalidTime},
		{"epoch", "k", ok, 1, time.Unix(0, 0), ErrInvalidTime},
		{"far future", "k", ok, 1, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), ErrInvalidTime},
	}
	for _, alg := range algorithms {
		l, err := New(c, alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range tests {
			for _, peek := range []bool{false, true} {
				var r hybridlimit.Result
				if peek {
					r, err = l.PeekAt(t.Context(), tt.now, tt.key, tt.limit, tt.cost)
				} else {
					r, err = l.AllowAt(t.Context(), tt.now, tt.key, tt.limit, tt.cost)
				}
				if !errors.Is(err, tt.want) || r.Allowed {
					t.Errorf("%v: %s (peek %v): %+v, %v; want an error wrapping %v", alg, tt.name, peek, r, err, tt.want)
				}
			}
		}
	}
	if _, seen := redistest.KeysWithoutTTL(t, c, p); seen != 0 {
		t.Errorf("bad input wrote %d keys", seen)
	}
}

// TestHugeLimit checks the largest limit Validate accepts is enforced, not
// silently unlimited, and that a key made of binary bytes works.
func TestHugeLimit(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Standalone(t)
	p := redistest.Prefix(t)
	const q = hybridlimit.MaxQuantity
	limit := hybridlimit.Limit{Rate: q, Period: 24 * time.Hour, Burst: q}
	for _, alg := range algorithms {
		l, err := New(c, alg, WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		key := "\x00\xff{huge}"
		r, err := l.AllowAt(t.Context(), t0, key, limit, q)
		if err != nil || !r.Allowed || r.Remaining != 0 {
			t.Fatalf("%v: AllowAt(t0, %d) = %+v, %v; want allowed, 0 remaining", alg, int64(q), r, err)
		}
		r, err = l.AllowAt(t.Context(), t0, key, limit, 1)
		if err != nil || r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
			t.Errorf("%v: AllowAt(t0, 1) after the burst = %+v, %v; want denied", alg, r, err)
		}
		// Half a period later a token bucket holds half its burst again;
		// a window still counts the burst.
		r, err = l.PeekAt(t.Context(), t0.Add(12*time.Hour), key, limit, 1)
		if err != nil {
			t.Fatal(err)
		}
		switch alg {
		case TokenBucket, GCRA:
			if r.Remaining < q/2-1 || r.Remaining > q/2 {
				t.Errorf("%v: PeekAt(t0+12h) remaining %d, want %d", alg, r.Remaining, int64(q/2))
			}
		default:
			if r.Remaining > q/2 {
				t.Errorf("%v: PeekAt(t0+12h) remaining %d, want at most %d", alg, r.Remaining, int64(q/2))
			}
		}
	}
	checkTTLs(t, c, p)
}
