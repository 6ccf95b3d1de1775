package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hybridlimit/hybridlimit/rules"
)

type ctxKey struct{}

type stringer string

func (s stringer) String() string { return string(s) }

func TestKeyFuncs(t *testing.T) {
	req := func(edit func(r *http.Request) *http.Request) *http.Request {
		r := httptest.NewRequest("POST", "http://example.com/items/42?x=1", nil)
		r.RemoteAddr = "192.0.2.7:1234"
		if edit != nil {
			r = edit(r)
		}
		return r
	}
	withHeader := func(k, v string) func(r *http.Request) *http.Request {
		return func(r *http.Request) *http.Request { r.Header.Set(k, v); return r }
	}
	withCtx := func(v any) func(r *http.Request) *http.Request {
		return func(r *http.Request) *http.Request {
			return r.WithContext(context.WithValue(r.Context(), ctxKey{}, v))
		}
	}
	user := User(func(ctx context.Context) (string, bool) {
		s, ok := ctx.Value(ctxKey{}).(string)
		return s, ok
	})
	tests := []struct {
		name   string
		kf     KeyFunc
		edit   func(*http.Request) *http.Request
		want   string
		wantOK bool
	}{
		{"header", Header("x-tenant"), withHeader("X-Tenant", "acme"), "acme", true},
		{"header absent", Header("X-Tenant"), nil, "", false},
		{"api key hashed", APIKey("X-API-Key"), withHeader("X-API-Key", "secret"), digest("secret"), true},
		{"api key bearer", APIKey("Authorization"), withHeader("Authorization", "Bearer  secret "), digest("secret"), true},
		{"api key absent", APIKey("X-API-Key"), nil, "", false},
		{"api key blank", APIKey("X-API-Key"), withHeader("X-API-Key", "  "), "", false},
		{"user", user, withCtx("u42"), "u42", true},
		{"user absent", user, nil, "", false},
		{"user empty", user, withCtx(""), "", false},
		{"context string", ContextValue(ctxKey{}), withCtx("v"), "v", true},
		{"context stringer", ContextValue(ctxKey{}), withCtx(stringer("s")), "s", true},
		{"context other type", ContextValue(ctxKey{}), withCtx(42), "", false},
		{"ip", IP(nil), nil, "192.0.2.7", true},
		{"ip masked", IP(&ClientIP{IPv4Prefix: 24}), nil, "192.0.2.0/24", true},
		{"route unset", Route(), nil, "", false},
		{"route", Route(), func(r *http.Request) *http.Request { r.Pattern = "POST /items/{id}"; return r }, "POST /items/{id}", true},
		{"route func", RouteFunc(func(*http.Request) string { return "/items/:id" }), nil, "/items/:id", true},
		{"path", Path(), nil, "/items/42", true},
		{"method", Method(), nil, "POST", true},
		{"static", Static("search"), nil, "search", true},
		{"join", rules.Join(Method(), Path()), nil, "POST|/items/42", true},
		{"join escapes", rules.Join(Static(`a|b`), Static(`c\`)), nil, `a\|b|c\\`, true},
		{"join needs all", rules.Join(Method(), Header("X-Tenant")), nil, "", false},
		{"join of none", rules.Join[*http.Request](), nil, "", false},
	}
	for _, tt := range tests {
		got, ok := tt.kf(req(tt.edit))
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: key = %q, %v, want %q, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestJoinInjective checks that distinct part lists make distinct keys.
func TestJoinInjective(t *testing.T) {
	lists := [][]string{{"a|b", "c"}, {"a", "b|c"}, {`a\`, "|c"}, {`a\|`, "c"}, {"a", "b", "c"}, {"a|b|c"}}
	seen := map[string][]string{}
	r := httptest.NewRequest("GET", "/", nil)
	for _, parts := range lists {
		var kfs []func(*http.Request) (string, bool)
		for _, p := range parts {
			kfs = append(kfs, Static(p))
		}
		k, _ := rules.Join(kfs...)(r)
		if prev, dup := seen[k]; dup {
			t.Errorf("rules.Join(%q) = rules.Join(%q) = %q", parts, prev, k)
		}
		seen[k] = parts
	}
}

func TestLimiterKeys(t *testing.T) {
	f := answer(allowed(1, 0), nil)
	m, err := New([]Rule{
		{Name: "plain", Limiter: f, Limit: limit10, Key: Static("k")},
		{Name: `we|ird#\`, Limiter: f, Limit: limit10, Key: Static("k")},
		{Name: "long", Limiter: f, Limit: limit10, Key: Static(string(make([]byte, 300)))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Check(httptest.NewRequest("GET", "/", nil)); err != nil {
		t.Fatal(err)
	}
	want := []string{"plain|k", `we\|ird\#\\|k`, "long#" + digest(string(make([]byte, 300)))}
	if len(f.Keys) != len(want) {
		t.Fatalf("keys = %q, want %q", f.Keys, want)
	}
	for i := range want {
		if f.Keys[i] != want[i] {
			t.Errorf("limiter key %d = %q, want %q", i, f.Keys[i], want[i])
		}
	}
}
