package httplimit

import (
	"net/http"
	"net/textproto"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
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

// sfInt clamps n into the range of a non-negative Structured Field Integer.
func sfInt(n int64) int64 { return ruleset.SFInt(n) }

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
		policy, state := ruleset.Fields(d.Policies)
		h[keyPolicy] = []string{policy}
		h[keyRateLimit] = []string{state}
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
