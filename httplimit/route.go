package httplimit

import (
	"net/http"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
	"github.com/hybridlimit/hybridlimit/internal/usage"
)

// router is a handler that can tell which of its patterns it would route a
// request to, without serving it: *http.ServeMux, and any router with the
// same method.
type router interface {
	Handler(r *http.Request) (h http.Handler, pattern string)
}

var _ router = (*http.ServeMux)(nil)

// checkRouted is Check for a request on its way into rt: a request without
// a pattern gets, for the rules, the one rt will route it to, so a rule
// keyed by Route limits around the mux as it does inside it. A request rt
// has no route for keeps no pattern, and a rule keyed by it has no key, as
// inside the mux: that is the request's doing, not the setup's, so no
// probe.
//
// The pattern is set on r itself while the rules read it, and taken off
// before the caller passes r on: a copy of the request would cost an
// allocation of the whole Request on every request, and a context value
// two more, while r is this call's alone until it returns (ServeMux sets
// r.Pattern in place the same way when it routes). Taking it off leaves
// next to set r.Pattern, r.PathValue's wildcards with it, as it does for
// any request; a router that sets no pattern itself does not receive one
// it did not choose.
func (m *Middleware) checkRouted(r *http.Request, rt router) (Decision, *usage.Tab, error) {
	if r.Pattern != "" {
		return m.check(r, nil)
	}
	_, r.Pattern = rt.Handler(r)
	d, tab, err := m.check(r, nil)
	r.Pattern = ""
	return d, tab, err
}

// probePattern is the pattern missingRoute lends a request.
const probePattern = "/"

// routeFix is what the log says of a rule missingRoute finds misconfigured.
const routeFix = "the rule's key reads the route pattern, which a request has only once a router has " +
	"matched it: pass the *http.ServeMux (or a router with the method Handler(*http.Request) " +
	"(http.Handler, string)) to Middleware.Handler, or wrap the handlers registered on it, or key by RouteFunc"

// missingRoute is the probe of a middleware that cannot resolve routes (it
// wraps no router, or Check is called directly): a rule that finds no key
// in a request without a pattern, and finds one once the request has a
// pattern, needs a route it will never see there. It asks the key function
// again, with a pattern lent to r for the call, only on that path.
var missingRoute ruleset.Probe[*http.Request] = func(key func(*http.Request) (string, bool), r *http.Request) string {
	if r.Pattern != "" {
		return ""
	}
	r.Pattern = probePattern
	_, ok := key(r)
	r.Pattern = ""
	if !ok {
		return ""
	}
	return routeFix
}
