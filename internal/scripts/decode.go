package scripts

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrMalformedReply is wrapped by every decoding error: the reply was not of
// the shape the script's header promises.
var ErrMalformedReply = errors.New("scripts: malformed reply")

// DecodeInts checks that reply is an array of exactly n integers and returns
// them. It is the one place a script reply is taken apart; everything else
// goes through it.
//
// reply may also be a []int64, as EvalShaInts reads it; then only its
// length is checked, and the slice itself returned.
func DecodeInts(reply any, n int) ([]int64, error) {
	if v, ok := reply.([]int64); ok {
		if len(v) != n {
			return nil, fmt.Errorf("%w: got %d elements, want %d", ErrMalformedReply, len(v), n)
		}
		return v, nil
	}
	arr, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: got %T, want an array of %d integers", ErrMalformedReply, reply, n)
	}
	if len(arr) != n {
		return nil, fmt.Errorf("%w: got %d elements, want %d", ErrMalformedReply, len(arr), n)
	}
	out := make([]int64, n)
	for i, v := range arr {
		x, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("%w: element %d is %T, want an integer", ErrMalformedReply, i, v)
		}
		out[i] = x
	}
	return out, nil
}

// Decision is the reply of a limiter script, decoded and checked.
type Decision struct {
	// Allowed reports whether the request was admitted (or, for a peek,
	// would be).
	Allowed bool
	// Remaining is the cost that could still be admitted now, >= 0.
	Remaining int64
	// RetryAfter is the time until the same cost could be admitted: 0 when
	// Allowed, at least a microsecond when not.
	RetryAfter time.Duration
	// ResetAfter is the time until the limiter is back to its idle state.
	ResetAfter time.Duration
}

// DecodeDecision decodes {allowed 0|1, remaining, retry_after_us,
// reset_after_us}, the reply of every limiter script, and checks its
// ranges: allowed is 0 or 1, nothing is negative, an allowed decision has
// no retry time and a denied one has some, and durations fit a
// time.Duration.
func DecodeDecision(reply any) (Decision, error) {
	v, err := DecodeInts(reply, 4)
	if err != nil {
		return Decision{}, err
	}
	allowed, remaining, retry, reset := v[0], v[1], v[2], v[3]
	switch {
	case allowed != 0 && allowed != 1:
		return Decision{}, fmt.Errorf("%w: allowed is %d, want 0 or 1", ErrMalformedReply, allowed)
	case remaining < 0:
		return Decision{}, fmt.Errorf("%w: remaining is %d", ErrMalformedReply, remaining)
	case allowed == 1 && retry != 0:
		return Decision{}, fmt.Errorf("%w: allowed with retry_after %dus", ErrMalformedReply, retry)
	case allowed == 0 && retry <= 0:
		return Decision{}, fmt.Errorf("%w: denied with retry_after %dus", ErrMalformedReply, retry)
	}
	return decision(allowed == 1, remaining, retry, reset)
}

// decision is the Decision of a reply whose ranges were checked, but for
// the durations, which must fit a time.Duration.
func decision(allowed bool, remaining, retry, reset int64) (Decision, error) {
	retryD, err := micros(retry, "retry_after")
	if err != nil {
		return Decision{}, err
	}
	resetD, err := micros(reset, "reset_after")
	if err != nil {
		return Decision{}, err
	}
	return Decision{Allowed: allowed, Remaining: remaining, RetryAfter: retryD, ResetAfter: resetD}, nil
}

// micros converts a non-negative count of microseconds to a Duration.
func micros(us int64, what string) (time.Duration, error) {
	if us < 0 || us > math.MaxInt64/int64(time.Microsecond) {
		return 0, fmt.Errorf("%w: %s is %dus", ErrMalformedReply, what, us)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Refunded is the reply of a limiter script run in Refund mode, decoded
// and checked.
type Refunded struct {
	// Given is the cost given back: at most the cost asked, less when the
	// state held less to give (a bucket that filled up, a window count
	// that had restarted).
	Given int64
	// Remaining is the cost that could be admitted now, after the refund.
	Remaining int64
	// ResetAfter is the time until the limiter is back to its idle state.
	ResetAfter time.Duration
}

// DecodeRefund decodes {given, remaining, 0, reset_after_us}, the reply of
// a limiter script in Refund mode, and checks that nothing is negative,
// given is at most cost, and the third element is 0.
func DecodeRefund(reply any, cost int64) (Refunded, error) {
	v, err := DecodeInts(reply, 4)
	if err != nil {
		return Refunded{}, err
	}
	given, remaining, zero, reset := v[0], v[1], v[2], v[3]
	switch {
	case given < 0 || given > cost:
		return Refunded{}, fmt.Errorf("%w: given is %d of a cost of %d", ErrMalformedReply, given, cost)
	case remaining < 0:
		return Refunded{}, fmt.Errorf("%w: remaining is %d", ErrMalformedReply, remaining)
	case zero != 0:
		return Refunded{}, fmt.Errorf("%w: refund with retry_after %dus", ErrMalformedReply, zero)
	}
	resetD, err := micros(reset, "reset_after")
	if err != nil {
		return Refunded{}, err
	}
	return Refunded{Given: given, Remaining: remaining, ResetAfter: resetD}, nil
}

// ErrChargeTooDeep is DecodeCharge's error for a charge the script
// refused, writing nothing: after it, the state would be further past its
// limit than the scripts represent exactly (MaxCharge tokens short, or
// 2^50 microseconds of refill).
var ErrChargeTooDeep = errors.New("scripts: charge would go deeper than the state can hold")

// DecodeCharge decodes {1, remaining, retry_after_us, reset_after_us},
// the reply of a limiter script in Charge mode, where retry_after is the
// wait for one unit (0 while one is left); or {-1, 0, 0, 0}, a charge
// refused (ErrChargeTooDeep). A charge lands whatever the state held, so
// its Decision is always Allowed.
func DecodeCharge(reply any) (Decision, error) {
	v, err := DecodeInts(reply, 4)
	if err != nil {
		return Decision{}, err
	}
	status, remaining, retry, reset := v[0], v[1], v[2], v[3]
	switch {
	case status == -1 && remaining == 0 && retry == 0 && reset == 0:
		return Decision{}, ErrChargeTooDeep
	case status != 1:
		return Decision{}, fmt.Errorf("%w: charge status is %d, want 1 or -1", ErrMalformedReply, status)
	case remaining < 0:
		return Decision{}, fmt.Errorf("%w: remaining is %d", ErrMalformedReply, remaining)
	case remaining > 0 && retry != 0:
		return Decision{}, fmt.Errorf("%w: %d left with retry_after %dus", ErrMalformedReply, remaining, retry)
	}
	return decision(true, remaining, retry, reset)
}
