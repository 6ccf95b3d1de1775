package httplimit

// This file holds request predicates, for a Rule's Match (which requests
// the rule applies to) and Exempt (which requests bypass it).

import (
	"crypto/subtle"
	"net/http"
	"net/netip"
	"strings"
)

// ClientPrefixes matches clients whose address, as res resolves it, is in
// one of the prefixes: health checkers, internal networks. Example:
// Rule.Exempt = ClientPrefixes(res, netip.MustParsePrefix("10.0.0.0/8")).
func ClientPrefixes(res *ClientIP, prefixes ...netip.Prefix) func(*http.Request) bool {
	if res == nil {
		res = &ClientIP{}
	}
	prefixes = append([]netip.Prefix(nil), prefixes...)
	return func(r *http.Request) bool {
		a, ok := res.Addr(r)
		if !ok {
			return false
		}
		for _, p := range prefixes {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
}

// Methods matches requests with one of the methods. Example:
// Rule.Exempt = Methods("OPTIONS", "HEAD").
func Methods(methods ...string) func(*http.Request) bool {
	set := make(map[string]bool, len(methods))
	for _, m := range methods {
		set[strings.ToUpper(m)] = true
	}
	return func(r *http.Request) bool { return set[r.Method] }
}

// PathPrefixes matches requests whose URL path starts with one of the
// prefixes. Example: Rule.Match = PathPrefixes("/search", "/export/").
func PathPrefixes(prefixes ...string) func(*http.Request) bool {
	prefixes = append([]string(nil), prefixes...)
	return func(r *http.Request) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(r.URL.Path, p) {
				return true
			}
		}
		return false
	}
}

// HeaderValues matches requests whose named header equals one of the
// values, compared in constant time since such a value may be a secret.
// Example: Rule.Exempt = HeaderValues("X-Internal-Token", os.Getenv("INTERNAL_TOKEN")).
func HeaderValues(name string, values ...string) func(*http.Request) bool {
	name = http.CanonicalHeaderKey(name)
	values = append([]string(nil), values...)
	return func(r *http.Request) bool {
		got := r.Header.Get(name)
		if got == "" {
			return false
		}
		match := 0
		for _, v := range values {
			match |= subtle.ConstantTimeCompare([]byte(got), []byte(v))
		}
		return match == 1
	}
}
