package hybridlimit

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name  string
		limit Limit
		ok    bool
	}{
		{"per second", PerSecond(10), true},
		{"per minute", PerMinute(100), true},
		{"per hour", PerHour(1), true},
		{"every", Every(100*time.Millisecond, 5), true},
		{"zero", Limit{}, false},
		{"zero rate", Limit{Rate: 0, Period: time.Second, Burst: 1}, false},
		{"negative rate", PerSecond(-1), false},
		{"zero burst", PerSecond(5).WithBurst(0), false},
		{"negative burst", PerSecond(5).WithBurst(-3), false},
		{"huge rate", PerSecond(MaxQuantity + 1), false},
		{"max rate", PerSecond(MaxQuantity), true},
		{"huge burst", PerSecond(1).WithBurst(math.MaxInt64), false},
		{"zero period", Limit{Rate: 1, Burst: 1}, false},
		{"negative period", Limit{Rate: 1, Period: -time.Second, Burst: 1}, false},
		{"sub-millisecond period", Every(time.Microsecond, 1), false},
		{"period too long", Every(400*24*time.Hour, 1), false},
		{"refill too long", PerHour(1).WithBurst(10000), false},
		{"refill just fits", PerHour(1).WithBurst(366 * 24), true},
	}
	for _, tt := range tests {
		err := tt.limit.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: %+v.Validate() = %v, want ok=%v", tt.name, tt.limit, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%s: error %v does not wrap ErrInvalidLimit", tt.name, err)
		}
	}
}

func TestLimitString(t *testing.T) {
	tests := []struct {
		limit Limit
		want  string
	}{
		{PerSecond(10), "10/s"},
		{PerMinute(100), "100/min"},
		{PerHour(5).WithBurst(1), "5/h burst 1"},
		{Every(250*time.Millisecond, 3), "1/250ms burst 3"},
	}
	for _, tt := range tests {
		if got := tt.limit.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.limit, got, tt.want)
		}
	}
}

func TestLimitRefillAndTokens(t *testing.T) {
	l := PerSecond(4).WithBurst(10)
	if got, want := l.Refill(), 2500*time.Millisecond; got != want {
		t.Errorf("Refill() = %v, want %v", got, want)
	}
	if got, want := l.TokensIn(750*time.Millisecond), 3.0; got != want {
		t.Errorf("TokensIn(750ms) = %v, want %v", got, want)
	}
	if got := l.TokensIn(-time.Second); got != 0 {
		t.Errorf("TokensIn(-1s) = %v, want 0", got)
	}
	if got := (Limit{}).Refill(); got != time.Duration(math.MaxInt64) {
		t.Errorf("zero Limit Refill() = %v, want saturation", got)
	}
}

func TestLimitCheckCost(t *testing.T) {
	l := PerSecond(10)
	tests := []struct {
		cost int64
		want error
	}{
		{1, nil},
		{10, nil},
		{0, ErrInvalidCost},
		{-5, ErrInvalidCost},
		{11, ErrCostExceedsBurst},
		{math.MaxInt64, ErrCostExceedsBurst},
	}
	for _, tt := range tests {
		if err := l.CheckCost(tt.cost); !errors.Is(err, tt.want) && !(err == nil && tt.want == nil) {
			t.Errorf("CheckCost(%d) = %v, want %v", tt.cost, err, tt.want)
		}
	}
}
