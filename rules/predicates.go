package rules

import "strings"

// Join combines key functions into one key, such as a quota per user per
// route: Join(httplimit.User(fn), httplimit.Route()). The rule applies only
// when every part does. Parts are joined by '|', and '|' and '\' inside a
// part are escaped, so distinct combinations never make the same key.
func Join[R any](parts ...func(R) (string, bool)) func(R) (string, bool) {
	parts = append([]func(R) (string, bool)(nil), parts...)
	return func(req R) (string, bool) {
		var b strings.Builder
		for i, p := range parts {
			k, ok := p(req)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteByte('|')
			}
			if !strings.ContainsAny(k, `|\`) {
				b.WriteString(k)
				continue
			}
			for j := 0; j < len(k); j++ {
				if k[j] == '|' || k[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(k[j])
			}
		}
		return b.String(), b.Len() > 0
	}
}

// AnyOf matches a request that any of the functions matches; nil
// functions are ignored. Example: Exempt: AnyOf(ips, health).
func AnyOf[R any](fns ...func(R) bool) func(R) bool {
	fns = append([]func(R) bool(nil), fns...)
	return func(r R) bool {
		for _, f := range fns {
			if f != nil && f(r) {
				return true
			}
		}
		return false
	}
}

// AllOf matches a request that every function matches; nil functions are
// ignored. Example:
// Match: AllOf(httplimit.Methods("POST"), httplimit.PathPrefixes("/upload")).
func AllOf[R any](fns ...func(R) bool) func(R) bool {
	fns = append([]func(R) bool(nil), fns...)
	return func(r R) bool {
		for _, f := range fns {
			if f != nil && !f(r) {
				return false
			}
		}
		return true
	}
}
