package rules

import (
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// Policy is one rule's state as the response reports it.
type Policy struct {
	// Name is the rule's name.
	Name string
	// Quota and Window are RateLimit-Policy's q and w: Quota units per
	// Window seconds.
	Quota, Window int64
	// Unit is RateLimit-Policy's qu, or "" for the default, requests.
	Unit string
	// Result is the rule's limiter's answer for this request; when the
	// rule's cost was given back, Remaining counts it again.
	Result hybridlimit.Result
	// Next is how long until more quota is available (RateLimit's t, the
	// effective window): for a token bucket (the hybrid, local, token
	// bucket and GCRA limiters) the time until its next token, for a fixed
	// window the time until it ends, for a denial of cost 1 its wait, and
	// on any denial never more than its wait. When Remaining is 0 it is
	// always known (a peek says it for a sliding window or log; see
	// the engine peeks); otherwise negative when unknown: a sliding window's
	// or a custom limiter's admission, whose quota may come back at any
	// time.
	Next time.Duration
}
