package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hybridlimit/hybridlimit/rules"
)

func TestMatchAndExempt(t *testing.T) {
	trusted, _ := ParsePrefixes("10.0.0.0/8")
	res := &ClientIP{TrustedProxies: trusted}
	internal, _ := ParsePrefixes("192.0.2.0/24")
	tests := []struct {
		name   string
		pred   func(*http.Request) bool
		method string
		path   string
		remote string
		header []string
		want   bool
	}{
		{"method", Methods("get", "HEAD"), "GET", "/", "1.1.1.1:1", nil, true},
		{"other method", Methods("HEAD"), "GET", "/", "1.1.1.1:1", nil, false},
		{"path prefix", PathPrefixes("/search", "/x/"), "GET", "/search/all", "1.1.1.1:1", nil, true},
		{"other path", PathPrefixes("/search"), "GET", "/s", "1.1.1.1:1", nil, false},
		{"client prefix", ClientPrefixes(res, internal...), "GET", "/", "192.0.2.9:1", nil, true},
		{"client prefix via proxy", ClientPrefixes(res, internal...), "GET", "/", "10.0.0.1:1", []string{"X-Forwarded-For", "192.0.2.9"}, true},
		{"client outside", ClientPrefixes(res, internal...), "GET", "/", "10.0.0.1:1", []string{"X-Forwarded-For", "198.51.100.9"}, false},
		{"header value", HeaderValues("X-Internal", "a", "s3cret"), "GET", "/", "1.1.1.1:1", []string{"X-Internal", "s3cret"}, true},
		{"wrong header value", HeaderValues("X-Internal", "s3cret"), "GET", "/", "1.1.1.1:1", []string{"X-Internal", "s3cre"}, false},
		{"absent header", HeaderValues("X-Internal", ""), "GET", "/", "1.1.1.1:1", nil, false},
		{"any of", rules.AnyOf(nil, Methods("POST"), PathPrefixes("/a")), "GET", "/a", "1.1.1.1:1", nil, true},
		{"any of none", rules.AnyOf[*http.Request](), "GET", "/a", "1.1.1.1:1", nil, false},
		{"all of", rules.AllOf(Methods("GET"), nil, PathPrefixes("/a")), "GET", "/a", "1.1.1.1:1", nil, true},
		{"all of, one fails", rules.AllOf(Methods("POST"), PathPrefixes("/a")), "GET", "/a", "1.1.1.1:1", nil, false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.path, nil)
		r.RemoteAddr = tt.remote
		for i := 0; i+1 < len(tt.header); i += 2 {
			r.Header.Set(tt.header[i], tt.header[i+1])
		}
		if got := tt.pred(r); got != tt.want {
			t.Errorf("%s: %s %s from %s = %v, want %v", tt.name, tt.method, tt.path, tt.remote, got, tt.want)
		}
	}
	// A rule with Match counts other requests as skipped.
	m, err := New([]Rule{{Name: "m", Limiter: answer(allowed(1, 0), nil), Limit: limit10, Key: Static("k"), Match: Methods("POST")}})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = m.Check(httptest.NewRequest("GET", "/", nil))
	_, _ = m.Check(httptest.NewRequest("POST", "/", nil))
	if o := m.Stats().Rules[0].Outcomes; o[rules.OutcomeSkipped] != 1 || o[rules.OutcomeAllowed] != 1 {
		t.Errorf("outcomes = %v, want 1 skipped and 1 allowed", o)
	}
}
