package httplimit

import (
	"net/http"
	"net/textproto"
	"strconv"
	"time"
)

// Field names.
const (
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
	HeaderRetryAfter      = "Retry-After"
	HeaderLegacyLimit     = "X-RateLimit-Limit"
	HeaderLegacyRemaining = "X-RateLimit-Remaining"
	HeaderLegacyReset     = "X-RateLimit-Reset"
)

// maxSFInteger is the largest Integer a Structured Field can carry.
const maxSFInteger = 999_999_999_999_999

// The field names as net/http stores them (Header.Set canonicalizes
// "RateLimit" to "Ratelimit"; field names are case-insensitive), computed
// once so that writing a field costs no canonicalization.
var (
	keyPolicy     = textproto.CanonicalMIMEHeaderKey(HeaderRateLimitPolicy)
	keyRateLimit  = textproto.CanonicalMIMEHeaderKey(HeaderRateLimit)
	keyRetryAfter = textproto.CanonicalMIMEHeaderKey(HeaderRetryAfter)
	keyLimit      = textproto.CanonicalMIMEHeaderKey(HeaderLegacyLimit)
	keyRemaining  = textproto.CanonicalMIMEHeaderKey(HeaderLegacyRemaining)
	keyReset      = textproto.CanonicalMIMEHeaderKey(HeaderLegacyReset)
)

// WriteHeaders sets on h the response fields of d, as the Handler does:
// RateLimit-Policy and RateLimit for d's policies, the X-RateLimit-*
// fields under WithLegacyHeaders, and Retry-After when d rejects the
// request and a wait would admit it. A handler that renders Check's
// decision itself, or an OnLimited hook that writes a body of its own,
// gets the same fields from it.
func (m *Middleware) WriteHeaders(h http.Header, d *Decision) {
	writeFields(h, d, m.flags.Load().legacy)
}

// writeFields sets the response fields of a decision on h.
func writeFields(h http.Header, d *Decision, legacy bool) {
	if len(d.Policies) > 0 {
		buf := make([]byte, 0, 48*len(d.Policies))
		buf = appendPolicyField(buf, d.Policies)
		h[keyPolicy] = []string{string(buf)}
		buf = appendRateLimitField(buf[:0], d.Policies)
		h[keyRateLimit] = []string{string(buf)}
		if legacy {
			p := &d.Policies[0]
			h[keyLimit] = []string{strconv.FormatInt(sfInt(p.Quota), 10)}
			h[keyRemaining] = []string{strconv.FormatInt(sfInt(p.Result.Remaining), 10)}
			h[keyReset] = []string{strconv.FormatInt(sfInt(ceilSeconds(p.Result.ResetAfter)), 10)}
		}
	}
	if d.Status != http.StatusOK && d.RetryAfter > 0 {
		h[keyRetryAfter] = []string{strconv.FormatInt(retrySeconds(d.RetryAfter), 10)}
	}
}

// retrySeconds returns a wait as Retry-After's delay-seconds: rounded up,
// since a client retrying early is denied again, and at least 1.
func retrySeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// appendPolicyField appends the RateLimit-Policy field value, a
// Structured Field List with one Item per policy: the name as a String,
// q (quota), w (window seconds), and qu when set.
//
//	"per-ip";q=100;w=60, "uploads";q=1000000;w=3600;qu="content-bytes"
func appendPolicyField(b []byte, ps []Policy) []byte {
	for i := range ps {
		p := &ps[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, p.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, sfInt(p.Quota), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, sfInt(p.Window), 10)
		if p.Unit != "" {
			b = append(b, ";qu="...)
			b = appendSFString(b, p.Unit)
		}
	}
	return b
}

// appendRateLimitField appends the RateLimit field value, a Structured
// Field List with one Item per policy: the name, r (the available quota)
// and t (the effective window: the seconds until more quota is available,
// Policy.Next rounded up, left out when unknown).
//
//	"per-ip";r=0;t=6
func appendRateLimitField(b []byte, ps []Policy) []byte {
	for i := range ps {
		p := &ps[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, p.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, sfInt(p.Result.Remaining), 10)
		if p.Next >= 0 {
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, sfInt(ceilSeconds(p.Next)), 10)
		}
	}
	return b
}

// appendSFString appends s as a Structured Field String: quoted, with '"'
// and '\' escaped. s must be printable ASCII, which New checks of names;
// any other byte is replaced by '?' rather than break the field.
func appendSFString(b []byte, s string) []byte {
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

// sfInt clamps n into the range of a non-negative Structured Field Integer.
func sfInt(n int64) int64 { return min(max(n, 0), maxSFInteger) }
