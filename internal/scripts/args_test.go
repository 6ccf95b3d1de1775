package scripts

import (
	"errors"
	"slices"
	"testing"
)

func TestGCRAArgs(t *testing.T) {
	tests := []struct {
		name string
		p    Params
		want []any
	}{
		{"3 per second", Params{Rate: 3, PeriodUS: 1e6, Burst: 3, Cost: 1},
			[]any{int64(0), "3 1000000 3", int64(1), int64(0)}},
		{"7 per minute, burst 2, peek", Params{Now: 5, Rate: 7, PeriodUS: 60e6, Burst: 2, Cost: 2, Mode: Peek},
			[]any{int64(5), "7 60000000 2", int64(2), int64(1)}},
		{"refund", Params{Now: 5, Rate: 7, PeriodUS: 60e6, Burst: 2, Cost: 1, Mode: Refund},
			[]any{int64(5), "7 60000000 2", int64(1), int64(2)}},
		// 2^40 * 8.64e10 overflows 64 bits; the 128-bit product does not.
		{"largest quantities", Params{Rate: 1 << 40, PeriodUS: 86_400_000_000, Burst: 1 << 40, Cost: 1 << 40},
			[]any{int64(0), "1099511627776 86400000000 1099511627776", int64(1 << 40), int64(0)}},
		{"a nanosecond per token", Params{Rate: 1e9, PeriodUS: 1e6, Burst: 10, Cost: 1},
			[]any{int64(0), "1000000000 1000000 10", int64(1), int64(0)}},
	}
	for _, tt := range tests {
		got, err := tt.p.GCRAArgs()
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: GCRAArgs() = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

func TestParamsRejects(t *testing.T) {
	good := Params{Rate: 1, PeriodUS: 1000, Burst: 5, Cost: 1}
	for _, p := range []Params{
		{}, {Rate: 1, PeriodUS: 1000, Burst: 5, Cost: 6}, {Rate: 1, PeriodUS: 1000, Burst: 5, Cost: 0},
		{Rate: 0, PeriodUS: 1000, Burst: 5, Cost: 1}, {Rate: 1, PeriodUS: 0, Burst: 5, Cost: 1},
		{Now: -1, Rate: 1, PeriodUS: 1000, Burst: 5, Cost: 1}, {Now: 1 << 53, Rate: 1, PeriodUS: 1000, Burst: 5, Cost: 1},
		{Rate: 1, PeriodUS: 1 << 53, Burst: 1, Cost: 1},
		{Rate: 1, PeriodUS: 1000, Burst: 5, Cost: 1, Mode: Charge + 1}, {Rate: 1, PeriodUS: 1000, Burst: 5, Cost: 1, Mode: -1},
		// A charge may exceed the burst, not MaxCharge, nor take 2^50us
		// to refill.
		{Rate: 1, PeriodUS: 1000, Burst: 5, Cost: MaxCharge + 1, Mode: Charge},
		{Rate: 1, PeriodUS: 1000, Burst: 5, Cost: 1 << 41, Mode: Charge},
	} {
		_, err1 := p.TokenBucketArgs()
		_, err2 := p.GCRAArgs()
		if !errors.Is(err1, ErrParams) || !errors.Is(err2, ErrParams) {
			t.Errorf("%+v: TokenBucketArgs %v, GCRAArgs %v; want ErrParams", p, err1, err2)
		}
	}
	// A bucket that fills in 2^50 microseconds or more is past what the
	// scripts' mul_div computes exactly (hybridlimit.Limit.Validate rejects
	// such limits anyway); 2^50 - 1 is not.
	for _, tt := range []struct {
		p  Params
		ok bool
	}{
		{Params{Rate: 1, PeriodUS: 1 << 40, Burst: 1 << 10, Cost: 1}, false},
		{Params{Rate: 3, PeriodUS: 1<<50 - 1, Burst: 3, Cost: 1}, true},
		{Params{Rate: 3, PeriodUS: 1<<40 + 1, Burst: 3 << 10, Cost: 1}, false},
		{Params{Rate: 1, PeriodUS: 1 << 50, Burst: 1, Cost: 1}, false},
		{Params{Rate: 1 << 50, PeriodUS: 1, Burst: 1, Cost: 1}, false},
	} {
		_, err1 := tt.p.TokenBucketArgs()
		_, err2 := tt.p.GCRAArgs()
		if ok := err1 == nil && err2 == nil; ok != tt.ok || !tt.ok && (!errors.Is(err1, ErrParams) || !errors.Is(err2, ErrParams)) {
			t.Errorf("%+v: TokenBucketArgs %v, GCRAArgs %v; want ok %v", tt.p, err1, err2, tt.ok)
		}
	}
	if _, err := good.GCRAArgs(); err != nil {
		t.Errorf("%+v: %v", good, err)
	}
	overBurst := Params{Rate: 1, PeriodUS: 1000, Burst: 5, Cost: 1 << 30, Mode: Charge}
	if _, err := overBurst.TokenBucketArgs(); err != nil {
		t.Errorf("%+v: %v; a charge may exceed the burst", overBurst, err)
	}
	if _, err := (Params{PeriodUS: 1000, Burst: 5, Cost: 1}).WindowArgs(); err != nil {
		t.Errorf("WindowArgs ignores Rate: %v", err)
	}
	for _, bad := range [][]any{{int64(0), int64(0), int64(1), "x"}, {int64(0), int64(1), int64(0), "x"}, {int64(0), int64(1), int64(1), ""}} {
		if _, err := ConcurrencyArgs(bad[0].(int64), bad[1].(int64), bad[2].(int64), bad[3].(string), false); !errors.Is(err, ErrParams) {
			t.Errorf("ConcurrencyArgs%v: %v", bad, err)
		}
	}
	if _, err := ReleaseArgs(0, ""); !errors.Is(err, ErrParams) {
		t.Errorf("ReleaseArgs with no id: %v", err)
	}
}
