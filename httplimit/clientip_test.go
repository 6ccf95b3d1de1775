package httplimit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"testing"
)

func TestClientIP(t *testing.T) {
	trusted, err := ParsePrefixes("10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.1", "::ffff:172.16.0.0/108")
	if err != nil {
		t.Fatal(err)
	}
	xff := &ClientIP{TrustedProxies: trusted}
	fwd := &ClientIP{TrustedProxies: trusted, Header: Forwarded}
	tests := []struct {
		name   string
		res    *ClientIP
		remote string
		header map[string][]string
		want   string
	}{
		{"peer", &ClientIP{}, "203.0.113.9:5555", nil, "203.0.113.9"},
		{"peer without port", &ClientIP{}, "203.0.113.9", nil, "203.0.113.9"},
		{"peer ipv6", &ClientIP{}, "[2001:db8::1%eth0]:443", nil, "2001:db8::1"},
		{"peer mapped", &ClientIP{}, "[::ffff:203.0.113.9]:1", nil, "203.0.113.9"},
		{"untrusted peer ignores xff", xff, "203.0.113.9:1", map[string][]string{"X-Forwarded-For": {"1.1.1.1"}}, "203.0.113.9"},
		{"one proxy", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"198.51.100.4"}}, "198.51.100.4"},
		{"client prefix spoof", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"6.6.6.6, 198.51.100.4"}}, "198.51.100.4"},
		{"proxy chain", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"6.6.6.6, 198.51.100.4, 10.1.2.3", "192.0.2.1"}}, "198.51.100.4"},
		{"all trusted", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"10.9.9.9, 10.1.1.1"}}, "10.9.9.9"},
		{"garbage stops the walk", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"198.51.100.4, garbage, 10.2.2.2"}}, "10.2.2.2"},
		{"empty hop stops the walk", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"198.51.100.4,,"}}, "10.0.0.1"},
		{"no header", xff, "10.0.0.1:1", nil, "10.0.0.1"},
		{"xff with ports", xff, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"[2001:db8::5]:80, 10.0.0.2:8080"}}, "2001:db8::5"},
		{"trusted mapped range", xff, "[::ffff:172.16.0.9]:1", map[string][]string{"X-Forwarded-For": {"198.51.100.4"}}, "198.51.100.4"},
		{"xff ignored under forwarded", fwd, "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"198.51.100.4"}}, "10.0.0.1"},
		{"forwarded", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {"for=198.51.100.4;proto=https"}}, "198.51.100.4"},
		{"forwarded quoted ipv6", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for="[2001:db8:cafe::17]:4711"`}}, "2001:db8:cafe::17"},
		{"forwarded chain", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for=6.6.6.6, For="198.51.100.4:80";by=x`, `for="[2001:db8:ffff::1]"`}}, "198.51.100.4"},
		{"forwarded quoted comma", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for=198.51.100.4;x="a,b;c", for=10.3.3.3`}}, "198.51.100.4"},
		{"forwarded unknown", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {"for=198.51.100.4, for=unknown"}}, "10.0.0.1"},
		{"forwarded obfuscated", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {"for=_hidden"}}, "10.0.0.1"},
		{"forwarded without for", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {"proto=https"}}, "10.0.0.1"},
		// A quote the client leaves open would swallow what the proxy
		// appends to the line, and the client's own for= was believed.
		{"forwarded unclosed quote", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for=6.6.6.6;x=", for=198.51.100.4`}}, "10.0.0.1"},
		{"forwarded unclosed quote, later line", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for=6.6.6.6;x="`, "for=198.51.100.4"}}, "198.51.100.4"},
		{"forwarded unclosed quote after a good element", fwd, "10.0.0.1:1", map[string][]string{"Forwarded": {`for=10.4.4.4, for=6.6.6.6;x=", for=10.5.5.5`}}, "10.0.0.1"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		for k, vs := range tt.header {
			for _, v := range vs {
				r.Header.Add(k, v)
			}
		}
		got, ok := tt.res.Addr(r)
		if !ok || got.String() != tt.want {
			t.Errorf("%s: Addr = %v, %v, want %s", tt.name, got, ok, tt.want)
		}
	}
}

func TestClientIPBadPeer(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "pipe"
	if a, ok := (&ClientIP{}).Addr(r); ok {
		t.Errorf("Addr of RemoteAddr %q = %v, want not ok", r.RemoteAddr, a)
	}
	if k, ok := IP(nil)(r); ok {
		t.Errorf("IP key of RemoteAddr %q = %q, want not ok", r.RemoteAddr, k)
	}
}

func TestClientIPMask(t *testing.T) {
	tests := []struct {
		res  ClientIP
		addr string
		want string
	}{
		{ClientIP{}, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{ClientIP{}, "192.0.2.77", "192.0.2.77/32"},
		{ClientIP{IPv6Prefix: 48}, "2001:db8:1:2:3:4:5:6", "2001:db8:1::/48"},
		{ClientIP{IPv6Prefix: 128}, "2001:db8::6", "2001:db8::6/128"},
		{ClientIP{IPv4Prefix: 16}, "192.0.2.77", "192.0.0.0/16"},
		{ClientIP{IPv4Prefix: 16}, "::ffff:192.0.2.77", "192.0.0.0/16"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = netip.AddrPortFrom(netip.MustParseAddr(tt.addr), 1).String()
		got, ok := tt.res.Prefix(r)
		if !ok || got.String() != tt.want {
			t.Errorf("%+v.Prefix(%s) = %v, want %s", tt.res, tt.addr, got, tt.want)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[2001:db8:1:2:3:4:5:6]:1"
	if k, _ := IP(nil)(r); k != "2001:db8:1:2::/64" {
		t.Errorf("IP key = %q, want the /64", k)
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes("10.1.2.3/8", " 192.0.2.1 ", "2001:db8::1", "::ffff:10.0.0.0/104")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "2001:db8::1/128", "10.0.0.0/8"}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("ParsePrefixes[%d] = %v, want %s", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "nope", ""} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("ParsePrefixes(%q) succeeded", bad)
		}
	}
}

func TestClientIPValidate(t *testing.T) {
	for _, c := range []ClientIP{{IPv4Prefix: 33}, {IPv6Prefix: -1}, {Header: 7}, {TrustedProxies: []netip.Prefix{{}}}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil", c)
		}
	}
	if err := (&ClientIP{IPv4Prefix: 24, IPv6Prefix: 56, Header: Forwarded}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestClientIPUnixPeer: behind a proxy that connects over a Unix socket
// (nginx proxy_pass http://unix:...), net/http sets RemoteAddr to "@",
// which is no IP: no TrustedProxies entry can match it, so the forwarding
// header was never read and per-IP rules were skipped for every request.
// TrustUnixPeer trusts such a peer as a proxy.
func TestClientIPUnixPeer(t *testing.T) {
	tp, _ := ParsePrefixes("10.0.0.0/8")
	tests := []struct {
		name   string
		res    ClientIP
		remote string
		xff    string
		want   string // "" for no address
	}{
		{"unix peer not trusted by default", ClientIP{}, "@", "203.0.113.7", ""},
		{"unix peer trusted", ClientIP{TrustUnixPeer: true}, "@", "203.0.113.7", "203.0.113.7"},
		{"trusted hops skipped", ClientIP{TrustUnixPeer: true, TrustedProxies: tp}, "@", "198.51.100.1, 10.0.0.2", "198.51.100.1"},
		{"client-written hops not believed", ClientIP{TrustUnixPeer: true}, "@", "192.0.2.66, 203.0.113.7", "203.0.113.7"},
		{"unix peer without header", ClientIP{TrustUnixPeer: true}, "@", "", ""},
		{"unix peer with a bad hop", ClientIP{TrustUnixPeer: true}, "@", "unknown", ""},
		{"TCP peer still the peer", ClientIP{TrustUnixPeer: true}, "198.51.100.9:1", "203.0.113.7", "198.51.100.9"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		if tt.xff != "" {
			r.Header.Set("X-Forwarded-For", tt.xff)
		}
		a, ok := tt.res.Addr(r)
		if ok != (tt.want != "") || (ok && a.String() != tt.want) {
			t.Errorf("%s: Addr = %v, %v, want %q", tt.name, a, ok, tt.want)
		}
	}
}

// TestClientIPUnixSocket serves over a real Unix socket and keys by IP.
func TestClientIPUnixSocket(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	key := IP(&ClientIP{TrustUnixPeer: true})
	type seen struct {
		remote, key string
		ok          bool
	}
	got := make(chan seen, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, ok := key(r)
		got <- seen{r.RemoteAddr, k, ok}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", ln.Addr().String())
	}}}
	req, _ := http.NewRequest("GET", "http://proxy/", nil)
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := <-got; !s.ok || s.key != "203.0.113.7" {
		t.Errorf("over a Unix socket (RemoteAddr %q): IP key = %q, %v, want 203.0.113.7", s.remote, s.key, s.ok)
	}
}
