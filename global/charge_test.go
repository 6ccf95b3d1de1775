package global

import (
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// TestChargeDebtLivesUntilRepaid charges three bursts on a real server:
// the charge lands, the key admits nothing until refill has repaid the
// debt (a window: until the window's count has left), and every key
// written lives at least that long.
func TestChargeDebtLivesUntilRepaid(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	limit := hybridlimit.PerSecond(10)
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			p := redistest.Prefix(t)
			l, err := New(rdb, alg, WithPrefix(p))
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			r, err := l.ChargeAt(t.Context(), now, "k", limit, 3*limit.Burst)
			if err != nil || !r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
				t.Fatalf("ChargeAt(30) = %+v, %v; want landed, nothing left, a wait for one", r, err)
			}
			if alg == TokenBucket || alg == GCRA {
				// 20 tokens of debt and one to admit: 2.1 s at 10 a second.
				if want := 2100 * time.Millisecond; r.RetryAfter != want {
					t.Errorf("RetryAfter = %v, want %v: the debt repaid, then one token", r.RetryAfter, want)
				}
				if want := 3 * time.Second; r.ResetAfter != want {
					t.Errorf("ResetAfter = %v, want %v", r.ResetAfter, want)
				}
			}
			keys, err := l.Keys("k")
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				ttl, err := rdb.PTTL(t.Context(), k).Result()
				if err != nil {
					t.Fatal(err)
				}
				// Redis's clock runs with the caller's here: the key must
				// hold what it owes until the next admission at least.
				if need := r.RetryAfter - time.Since(now); ttl < need {
					t.Errorf("%s: TTL %v, shorter than the %v the debt is owed", k, ttl, need)
				}
			}
			just := now.Add(r.RetryAfter - time.Microsecond)
			if d, err := l.AllowAt(t.Context(), just, "k", limit, 1); err != nil || d.Allowed {
				t.Errorf("a microsecond before RetryAfter: %+v, %v; want denied", d, err)
			}
			if d, err := l.AllowAt(t.Context(), now.Add(r.RetryAfter), "k", limit, 1); err != nil || !d.Allowed {
				t.Errorf("at RetryAfter: %+v, %v; want admitted", d, err)
			}
			redistest.CheckTTLs(t, rdb, p)
		})
	}
}

// TestChargeRejects: a negative charge, one past what a script represents,
// and one Redis finds would go deeper than that are refused with
// ErrInvalidCost and change nothing; a charge of 0 changes nothing.
func TestChargeRejects(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	slow := hybridlimit.Limit{Rate: 1, Period: time.Second, Burst: 1}
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l, err := New(rdb, alg, WithPrefix(redistest.Prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			now := time.Now()
			// Deep enough that a second charge of the same cost would take
			// the key past what the scripts hold: 2^50 microseconds of
			// refill for the buckets, a count of 2^50 for the windows.
			deep := int64(1<<49 + 1)
			if alg == TokenBucket || alg == GCRA {
				deep = 1<<49/slow.Period.Microseconds() + 1
			}
			if _, err := l.ChargeAt(ctx, now, "k", slow, deep); err != nil {
				t.Fatalf("ChargeAt(%d) = %v", deep, err)
			}
			before, err := l.PeekAt(ctx, now, "k", slow, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, cost := range []int64{-1, scripts.MaxCharge + 1, deep} {
				r, err := l.ChargeAt(ctx, now, "k", slow, cost)
				if !errors.Is(err, hybridlimit.ErrInvalidCost) {
					t.Errorf("ChargeAt(%d) = %+v, %v; want ErrInvalidCost", cost, r, err)
				}
			}
			if r, err := l.ChargeAt(ctx, now, "k", slow, 0); err != nil || !r.Allowed || r.RetryAfter != before.RetryAfter {
				t.Errorf("ChargeAt(0) = %+v, %v; want landed, the state unchanged (%+v)", r, err, before)
			}
			after, err := l.PeekAt(ctx, now, "k", slow, 1)
			if err != nil {
				t.Fatal(err)
			}
			if after != before {
				t.Errorf("after the refused charges: %+v, want %+v", after, before)
			}
			// A charge whose own refill takes 2^50 microseconds is refused
			// before Redis is asked.
			if alg == TokenBucket || alg == GCRA {
				perHour := hybridlimit.PerHour(1)
				cost := int64(1<<50)/perHour.Period.Microseconds() + 1
				if _, err := l.ChargeAt(ctx, now, "fresh", perHour, cost); !errors.Is(err, hybridlimit.ErrInvalidCost) {
					t.Errorf("ChargeAt(%d) of %v: %v, want ErrInvalidCost", cost, perHour, err)
				}
			}
		})
	}
}

// TestChargeAcrossLimitChange: a token bucket keeps the tokens it owes
// across a limit change, GCRA the instant its debt is repaid.
func TestChargeAcrossLimitChange(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	from, to := hybridlimit.PerSecond(10), hybridlimit.PerSecond(20)
	for _, tc := range []struct {
		alg  Algorithm
		want time.Duration // the wait for one token under to
	}{
		{TokenBucket, 1050 * time.Millisecond}, // 20 owed and one more, at 20 a second
		{GCRA, 2050 * time.Millisecond},        // empty again at 2 s, one token 50 ms later
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			l, err := New(rdb, tc.alg, WithPrefix(redistest.Prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			if _, err := l.ChargeAt(t.Context(), now, "k", from, 3*from.Burst); err != nil {
				t.Fatal(err)
			}
			r, err := l.PeekAt(t.Context(), now, "k", to, 1)
			if err != nil || r.Allowed || r.RetryAfter != tc.want {
				t.Errorf("under %v: %+v, %v; want denied for %v", to, r, err, tc.want)
			}
		})
	}
}

// TestChargeDebtCutAtLimitChange: a debt that a new limit would take 2^50
// microseconds or more to repay, or 2^50 tokens or more, is cut to what the
// scripts' arithmetic holds, so every figure after it stays exact: the
// token bucket to 2^50 - 1 microseconds of the new refill (a debt of 2^40
// tokens charged at a million a second, read under one a second), GCRA
// to 2^50 - 1 tokens of the new limit (a debt of 2^49 microseconds
// charged at one a second, read under a billion a second).
func TestChargeDebtCutAtLimitChange(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	for _, tc := range []struct {
		alg      Algorithm
		from, to hybridlimit.Limit
		cost     int64
		want     time.Duration // the wait for one unit under to
	}{
		// Short of full by floor((2^50-1)/10^6) = 1,125,899,906 tokens at
		// most: n = 1 - that; the next token takes (1 - n) seconds.
		{TokenBucket, hybridlimit.PerSecond(1_000_000), hybridlimit.PerSecond(1), 1 << 40,
			1_125_899_906 * time.Second},
		// TAT cut to now + floor((2^50-1)*10^6/10^9) - 1 = now +
		// 1,125,899,906,841us; a token is due that less burst*T (10^6us),
		// rounded up past T's fraction: 1,125,898,906,842us.
		{GCRA, hybridlimit.PerSecond(1), hybridlimit.PerSecond(1_000_000_000), 1 << 49 / 1_000_000,
			1_125_898_906_842 * time.Microsecond},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			l, err := New(rdb, tc.alg, WithPrefix(redistest.Prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			if _, err := l.ChargeAt(t.Context(), now, "k", tc.from, tc.cost); err != nil {
				t.Fatal(err)
			}
			r, err := l.PeekAt(t.Context(), now, "k", tc.to, 1)
			if err != nil || r.Allowed || r.RetryAfter != tc.want {
				t.Errorf("under %v: %+v, %v; want denied for %v", tc.to, r, err, tc.want)
			}
		})
	}
}
