package rls

import (
	"fmt"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Unit is a rate limit's unit of time, as Envoy's protos spell it.
type Unit = rlspb.RateLimitResponse_RateLimit_Unit

// unitSeconds returns the length of u in seconds: MONTH is 30 days and YEAR
// 365 days, as the reference service counts them. UNKNOWN and values outside
// the enum report false.
func unitSeconds(u Unit) (int64, bool) {
	switch u {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		return 1, true
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		return 60, true
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		return 3600, true
	case rlspb.RateLimitResponse_RateLimit_DAY:
		return 86400, true
	case rlspb.RateLimitResponse_RateLimit_WEEK:
		return 7 * 86400, true
	case rlspb.RateLimitResponse_RateLimit_MONTH:
		return 30 * 86400, true
	case rlspb.RateLimitResponse_RateLimit_YEAR:
		return 365 * 86400, true
	}
	return 0, false
}

// parseUnit reads a unit as YAML spells it, in any case ("minute", "MINUTE").
func parseUnit(s string) (Unit, bool) {
	v, ok := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
	if !ok || Unit(v) == rlspb.RateLimitResponse_RateLimit_UNKNOWN {
		return rlspb.RateLimitResponse_RateLimit_UNKNOWN, false
	}
	return Unit(v), true
}

// overrideUnit converts the unit of a descriptor's limit override (the
// envoy.type.v3 enum, numbered like the response's) and checks it.
func overrideUnit(u typepb.RateLimitUnit) (Unit, error) {
	unit := Unit(u)
	if _, ok := unitSeconds(unit); !ok {
		return unit, fmt.Errorf("limit override has unit %s: want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", u)
	}
	return unit, nil
}

// maxPeriod bounds a rule's period (its unit times its multiplier): the
// longest period a hybridlimit.Limit may have.
const maxPeriod = hybridlimit.MaxRefill

// periodOf returns the length of mult units of u, checked against maxPeriod.
func periodOf(u Unit, mult uint32) (time.Duration, error) {
	sec, ok := unitSeconds(u)
	if !ok {
		return 0, fmt.Errorf("unit %s is not a unit of time", u)
	}
	if mult == 0 {
		mult = 1
	}
	d := time.Duration(sec) * time.Duration(mult) * time.Second
	if d > maxPeriod {
		return 0, fmt.Errorf("%d x %s is longer than %v", mult, u, maxPeriod)
	}
	return d, nil
}
