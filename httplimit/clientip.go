package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Forwarding names the header in which the trusted proxies in front of a
// server record the addresses they forwarded for.
type Forwarding int

const (
	// XForwardedFor (the default) reads X-Forwarded-For: a comma-separated
	// list of addresses, each proxy appending the address of its peer.
	XForwardedFor Forwarding = iota
	// Forwarded reads the standard Forwarded header of RFC 7239, its for=
	// parameters, including quoted IPv6 such as for="[2001:db8::1]:443".
	Forwarded
)

func (f Forwarding) String() string {
	switch f {
	case XForwardedFor:
		return "x-forwarded-for"
	case Forwarded:
		return "forwarded"
	}
	return fmt.Sprintf("Forwarding(%d)", int(f))
}

// Default prefix lengths a ClientIP masks addresses to.
const (
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)

// ClientIP resolves the address a request came from. With no trusted
// proxies it is the peer address (Request.RemoteAddr), which a client cannot
// forge. With trusted proxies, and a peer among them, it walks the
// forwarding header from right to left, skipping every address that is
// itself a trusted proxy, and takes the first one that is not: the address
// the outermost trusted proxy saw. Addresses left of it were written by the
// client and are never believed. A hop that cannot be parsed ("unknown", an
// obfuscated node, garbage) stops the walk at the last trusted hop.
//
// The address is then masked: an IPv6 client usually holds a whole /64, so
// by default IPv6 addresses are keyed by their /64 and IPv4 ones by the full
// address. IPv4-mapped IPv6 addresses count as IPv4.
//
// The zero ClientIP trusts no proxy and masks with the defaults. A ClientIP
// must not be changed while in use; it is then safe for concurrent use.
type ClientIP struct {
	// TrustedProxies are the addresses of the proxies in front of this
	// server, such as a load balancer's subnet; see ParsePrefixes.
	TrustedProxies []netip.Prefix
	// Header is where the trusted proxies record the addresses they
	// forward for. Trust only the one they set and overwrite: a header
	// they pass through untouched is the client's to write.
	Header Forwarding
	// IPv4Prefix and IPv6Prefix are the bits of an address that make the
	// key: 1 to 32 and 1 to 128. Zero means DefaultIPv4Prefix and
	// DefaultIPv6Prefix.
	IPv4Prefix, IPv6Prefix int
	// TrustUnixPeer trusts a peer that has no IP address as a proxy: one
	// connected over a Unix socket, for which net/http sets RemoteAddr to
	// "@". Without it such a request has no client address, and IP rules
	// do not apply to it (rules.OutcomeNoKey). Set it when only your proxy can
	// reach the socket.
	TrustUnixPeer bool
}

// ParsePrefixes parses CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") and
// single addresses ("192.0.2.1", a /32 or /128), as TrustedProxies takes
// them. IPv4-mapped IPv6 prefixes are turned into IPv4 ones.
func ParsePrefixes(cidrs ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		var p netip.Prefix
		if strings.Contains(s, "/") {
			var err error
			if p, err = netip.ParsePrefix(s); err != nil {
				return nil, fmt.Errorf("httplimit: trusted proxy %q: %w", s, err)
			}
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("httplimit: trusted proxy %q: %w", s, err)
			}
			a = a.WithZone("")
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Validate reports a prefix length out of range or an unknown header.
func (c *ClientIP) Validate() error {
	switch {
	case c.IPv4Prefix < 0 || c.IPv4Prefix > 32:
		return fmt.Errorf("httplimit: IPv4 prefix /%d is outside [1, 32]", c.IPv4Prefix)
	case c.IPv6Prefix < 0 || c.IPv6Prefix > 128:
		return fmt.Errorf("httplimit: IPv6 prefix /%d is outside [1, 128]", c.IPv6Prefix)
	case c.Header != XForwardedFor && c.Header != Forwarded:
		return fmt.Errorf("httplimit: unknown forwarding header %d", int(c.Header))
	}
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			return fmt.Errorf("httplimit: invalid trusted proxy prefix %v", p)
		}
	}
	return nil
}

// Addr returns the client's address, unmasked. It reports false when the
// peer address is not an IP, as on a Unix socket ("@"), unless
// TrustUnixPeer; then when the forwarding header names no address.
func (c *ClientIP) Addr(r *http.Request) (netip.Addr, bool) {
	peer, ok := parseNode(r.RemoteAddr)
	if !ok && !c.TrustUnixPeer {
		return netip.Addr{}, false
	}
	if ok && !c.trusted(peer) {
		return peer, true
	}
	var hops []string
	if c.Header == Forwarded {
		hops = forwardedFor(r.Header.Values("Forwarded"))
	} else {
		for _, v := range r.Header.Values("X-Forwarded-For") {
			hops = append(hops, strings.Split(v, ",")...)
		}
	}
	client := peer // invalid for a Unix-socket peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseNode(strings.TrimSpace(hops[i]))
		if !ok {
			break
		}
		client = a
		if !c.trusted(a) {
			break
		}
	}
	return client, client.IsValid()
}

// Prefix returns the client's address masked to the configured prefix.
func (c *ClientIP) Prefix(r *http.Request) (netip.Prefix, bool) {
	a, ok := c.Addr(r)
	if !ok {
		return netip.Prefix{}, false
	}
	return c.mask(a), true
}

func (c *ClientIP) mask(a netip.Addr) netip.Prefix {
	bits := c.IPv6Prefix
	if bits <= 0 || bits > 128 {
		bits = DefaultIPv6Prefix
	}
	if a.Is4() {
		bits = c.IPv4Prefix
		if bits <= 0 || bits > 32 {
			bits = DefaultIPv4Prefix
		}
	}
	p, _ := a.Prefix(bits) // bits is in range for a's family
	return p
}

func (c *ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseNode parses an address as forwarding headers and RemoteAddr write
// it: "192.0.2.1", "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]" or
// "[2001:db8::1]:443". Zones are dropped and IPv4-mapped addresses unmapped.
func parseNode(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err = netip.ParseAddr(s[1 : len(s)-1]); err != nil {
			return netip.Addr{}, false
		}
	} else if a, err = netip.ParseAddr(s); err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// forwardedFor returns the for= node of each element of the Forwarded
// header lines, in order; an element without one yields "". Values may be
// tokens or quoted strings; commas and semicolons inside quotes do not
// split. A quote left open makes the rest of its line one element that
// yields "": it may hide what a proxy appended after the client's text,
// so the walk must stop there rather than believe the client's for=.
func forwardedFor(lines []string) []string {
	var out []string
	for _, line := range lines {
		elems, closed := splitQuoted(line, ',')
		for i, elem := range elems {
			node := ""
			if !closed && i == len(elems)-1 {
				out = append(out, node)
				break
			}
			pairs, _ := splitQuoted(elem, ';')
			for _, pair := range pairs {
				k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
					node = unquote(strings.TrimSpace(v))
				}
			}
			out = append(out, node)
		}
	}
	return out
}

// splitQuoted splits s at sep outside double quotes, honouring backslash
// escapes inside them, and reports whether every quote was closed.
func splitQuoted(s string, sep byte) (parts []string, closed bool) {
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:]), !quoted
}

// unquote returns the content of an RFC 9110 quoted-string, or s itself
// when it is a token.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
