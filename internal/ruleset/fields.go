package ruleset

import (
	"strconv"

	"github.com/hybridlimit/hybridlimit/rules"
)

// MaxSFInteger is the largest Integer a Structured Field can carry.
const MaxSFInteger = 999_999_999_999_999

// Fields returns the RateLimit-Policy and RateLimit field values of
// draft-ietf-httpapi-ratelimit-headers-11 for ps, as HTTP headers and
// gRPC metadata carry them.
func Fields(ps []rules.Policy) (policy, state string) {
	buf := make([]byte, 0, 48*len(ps))
	buf = AppendPolicyField(buf, ps)
	policy = string(buf)
	buf = AppendRateLimitField(buf[:0], ps)
	return policy, string(buf)
}

// AppendPolicyField appends the RateLimit-Policy field value, a
// Structured Field List with one Item per policy: the name as a String,
// q (quota), w (window seconds), and qu when set.
//
//	"per-ip";q=100;w=60, "uploads";q=1000000;w=3600;qu="content-bytes"
func AppendPolicyField(b []byte, ps []rules.Policy) []byte {
	for i := range ps {
		p := &ps[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		b = AppendSFString(b, p.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, SFInt(p.Quota), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, SFInt(p.Window), 10)
		if p.Unit != "" {
			b = append(b, ";qu="...)
			b = AppendSFString(b, p.Unit)
		}
	}
	return b
}

// AppendRateLimitField appends the RateLimit field value, a Structured
// Field List with one Item per policy: the name, r (the available quota)
// and t (the effective window: the seconds until more quota is available,
// Policy.Next rounded up, left out when unknown, which it never is when r
// is 0).
//
//	"per-ip";r=0;t=6
func AppendRateLimitField(b []byte, ps []rules.Policy) []byte {
	for i := range ps {
		p := &ps[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		b = AppendSFString(b, p.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, SFInt(p.Result.Remaining), 10)
		if p.Next >= 0 {
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, SFInt(CeilSeconds(p.Next)), 10)
		}
	}
	return b
}

// AppendSFString appends s as a Structured Field String: quoted, with '"'
// and '\' escaped. s must be printable ASCII, which New checks of names;
// any other byte is replaced by '?' rather than break the field.
func AppendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// SFInt clamps n into the range of a non-negative Structured Field Integer.
func SFInt(n int64) int64 { return min(max(n, 0), MaxSFInteger) }
