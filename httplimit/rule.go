package httplimit

import (
	"errors"
	"net/http"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
	"github.com/hybridlimit/hybridlimit/rules"
)

// A Rule is one quota policy of the middleware: Limit per key, the key
// being what Key returns for the request (a KeyFunc, such as IP or
// APIKey). It is the HTTP instance of the rule all front ends share; see
// rules.Rule for its fields. A request an enforced rule denies gets 429
// with Retry-After; one whose limit could not be checked (OnError
// FailClosed, or a limiter's own FailClosed policy) gets 503 and a
// temporary-reduced-capacity problem.
type Rule = rules.Rule[*http.Request]

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 { return ruleset.CeilSeconds(d) }

var errNilLogger = errors.New("httplimit: nil logger")
