package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
)

// A KeyFunc says whose quota a request spends under a rule: the API key, the
// user, the client IP, the route. It returns ok false when the rule does not
// apply to the request (no API key header, no authenticated user); the rule
// is then skipped, and counted as such.
//
// The key a KeyFunc returns is an identity, not a Redis key: the middleware
// prefixes it with the rule's name, so rules sharing a Limiter never share a
// quota, and hashes it when it is long (see Rule).
type KeyFunc func(r *http.Request) (key string, ok bool)

// Header returns the first value of the named request header, when it is
// not empty. Example: Header("X-Tenant-ID") for a quota per tenant.
//
// The value is sent by the client: use it only for identities the server
// checks elsewhere, or where a client choosing its own key is harmless.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		v := r.Header.Get(name)
		return v, v != ""
	}
}

// APIKey returns the SHA-256 of the named header's value, hex-encoded and
// truncated to 128 bits, so API keys never appear in Redis key names, logs or
// metrics. Example: APIKey("X-API-Key"). An "Authorization: Bearer <t>"
// value is keyed by the token, so APIKey("Authorization") works too.
//
// The middleware cannot tell a valid key from an invented one: put the rule
// behind authentication, or pair it with a per-IP rule so that inventing keys
// does not buy quota.
func APIKey(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		v := strings.TrimSpace(r.Header.Get(name))
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			v = strings.TrimSpace(v[7:])
		}
		if v == "" {
			return "", false
		}
		return digest(v), true
	}
}

// digest returns 128 bits of SHA-256 of s, hex-encoded.
func digest(s string) string { return ruleset.Digest(s) }

// User returns the identity that fn finds in the request's context, which
// an authentication middleware in front of this one put there. Example:
//
//	httplimit.User(func(ctx context.Context) (string, bool) {
//		u, ok := ctx.Value(userKey{}).(*User)
//		if !ok {
//			return "", false
//		}
//		return u.ID, true
//	})
func User(fn func(ctx context.Context) (string, bool)) KeyFunc {
	return func(r *http.Request) (string, bool) {
		id, ok := fn(r.Context())
		return id, ok && id != ""
	}
}

// ContextValue returns the request context's value for key when it is a
// non-empty string or a fmt.Stringer. Example: ContextValue(userIDKey{}).
func ContextValue(key any) KeyFunc {
	return func(r *http.Request) (string, bool) {
		var s string
		switch v := r.Context().Value(key).(type) {
		case string:
			s = v
		case fmt.Stringer:
			s = v.String()
		}
		return s, s != ""
	}
}

// IP returns the client address as res resolves it, masked to its prefix:
// "203.0.113.7" or "2001:db8:1:2::/64". Example: IP(&ClientIP{}) keys by
// the peer address; see ClientIP for proxies. A request with no address,
// such as one from a proxy on a Unix socket without
// ClientIP.TrustUnixPeer, has no key: the rule does not apply to it.
func IP(res *ClientIP) KeyFunc {
	if res == nil {
		res = &ClientIP{}
	}
	return func(r *http.Request) (string, bool) {
		p, ok := res.Prefix(r)
		if !ok {
			return "", false
		}
		if p.Bits() == p.Addr().BitLen() {
			return p.Addr().String(), true
		}
		return p.String(), true
	}
}

// Route returns the pattern that net/http's ServeMux matched, such as
// "GET /items/{id}", so every item shares one quota. The middleware finds
// it around the mux, m.Handler(mux), or inside it, around the handlers
// registered on it (see Middleware.Handler); with a router that cannot
// say its pattern, use RouteFunc. The rule does not apply to requests the
// mux has no route for. Rules see the pattern, not the wildcards:
// r.PathValue is empty to them around the mux.
func Route() KeyFunc {
	return func(r *http.Request) (string, bool) { return r.Pattern, r.Pattern != "" }
}

// RouteFunc returns what fn says is the request's route, for routers that
// keep it elsewhere. Example for chi, inside a handler chain after routing:
// RouteFunc(func(r *http.Request) string { return chi.RouteContext(r.Context()).RoutePattern() }).
func RouteFunc(fn func(r *http.Request) string) KeyFunc {
	return func(r *http.Request) (string, bool) {
		s := fn(r)
		return s, s != ""
	}
}

// Path returns the request's URL path. Every distinct path gets its own
// quota, so prefer Route where paths carry IDs.
func Path() KeyFunc {
	return func(r *http.Request) (string, bool) { return r.URL.Path, r.URL.Path != "" }
}

// Method returns the request method. Example: Join(Route(), Method()).
func Method() KeyFunc {
	return func(r *http.Request) (string, bool) { return r.Method, r.Method != "" }
}

// Static returns the same key for every request: one quota shared by all
// clients, such as a global cap on an expensive endpoint. Example:
// Static("search").
func Static(key string) KeyFunc {
	return func(*http.Request) (string, bool) { return key, key != "" }
}
