package scripts

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestDecodeDecision(t *testing.T) {
	tests := []struct {
		name  string
		reply any
		want  Decision
		ok    bool
	}{
		{"allowed", []any{int64(1), int64(4), int64(0), int64(1500)}, Decision{true, 4, 0, 1500 * time.Microsecond}, true},
		{"denied", []any{int64(0), int64(0), int64(7), int64(9)}, Decision{false, 0, 7 * time.Microsecond, 9 * time.Microsecond}, true},
		{"nil", nil, Decision{}, false},
		{"not an array", int64(1), Decision{}, false},
		{"string array", []any{"1", "2", "3", "4"}, Decision{}, false},
		{"short", []any{int64(1), int64(2), int64(0)}, Decision{}, false},
		{"long", []any{int64(1), int64(2), int64(0), int64(0), int64(0)}, Decision{}, false},
		{"allowed is 2", []any{int64(2), int64(0), int64(0), int64(0)}, Decision{}, false},
		{"negative remaining", []any{int64(1), int64(-1), int64(0), int64(0)}, Decision{}, false},
		{"allowed with a retry", []any{int64(1), int64(0), int64(5), int64(0)}, Decision{}, false},
		{"denied without a retry", []any{int64(0), int64(0), int64(0), int64(5)}, Decision{}, false},
		{"negative reset", []any{int64(1), int64(0), int64(0), int64(-1)}, Decision{}, false},
		{"reset overflows a Duration", []any{int64(1), int64(0), int64(0), int64(math.MaxInt64)}, Decision{}, false},
		{"float element", []any{int64(1), 2.5, int64(0), int64(0)}, Decision{}, false},
	}
	for _, tt := range tests {
		got, err := DecodeDecision(tt.reply)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("%s: DecodeDecision(%#v) = %+v, %v; want %+v, ok %v", tt.name, tt.reply, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrMalformedReply) {
			t.Errorf("%s: error %v does not wrap ErrMalformedReply", tt.name, err)
		}
	}
}

func TestDecodeCharge(t *testing.T) {
	ints := func(v ...int64) []any {
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = x
		}
		return out
	}
	tests := []struct {
		name  string
		reply any
		want  Decision
		err   error
	}{
		{"one left", ints(1, 1, 0, 900), Decision{true, 1, 0, 900 * time.Microsecond}, nil},
		{"in debt", ints(1, 0, 2100, 3000), Decision{true, 0, 2100 * time.Microsecond, 3000 * time.Microsecond}, nil},
		{"refused", ints(-1, 0, 0, 0), Decision{}, ErrChargeTooDeep},
		{"refused with figures", ints(-1, 3, 0, 0), Decision{}, ErrMalformedReply},
		{"status 0", ints(0, 0, 5, 5), Decision{}, ErrMalformedReply},
		{"negative remaining", ints(1, -1, 5, 5), Decision{}, ErrMalformedReply},
		{"left with a wait", ints(1, 2, 5, 5), Decision{}, ErrMalformedReply},
		{"negative reset", ints(1, 0, 5, -1), Decision{}, ErrMalformedReply},
		{"short", ints(1, 0, 5), Decision{}, ErrMalformedReply},
	}
	for _, tt := range tests {
		got, err := DecodeCharge(tt.reply)
		if got != tt.want || (tt.err == nil) != (err == nil) || tt.err != nil && !errors.Is(err, tt.err) {
			t.Errorf("%s: DecodeCharge(%v) = %+v, %v; want %+v, %v", tt.name, tt.reply, got, err, tt.want, tt.err)
		}
	}
}

func TestDecodeInts(t *testing.T) {
	got, err := DecodeInts([]any{int64(1), int64(-2)}, 2)
	if err != nil || len(got) != 2 || got[0] != 1 || got[1] != -2 {
		t.Errorf("DecodeInts = %v, %v", got, err)
	}
	if _, err := DecodeInts([]any{}, 1); !errors.Is(err, ErrMalformedReply) {
		t.Errorf("DecodeInts of a short array: %v", err)
	}
}
