package grpclimit

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
)

// Call is what a rule sees of one gRPC call: its context, which carries the
// incoming metadata and the peer, and its full method name.
type Call struct {
	// Ctx is the call's context.
	Ctx context.Context
	// FullMethod is the method's full name, "/package.Service/Method".
	FullMethod string
	// Stream is true for a streaming call.
	Stream bool
}

// A KeyFunc says whose quota a call spends under a rule. It returns ok
// false when the rule does not apply to the call (no API key in the
// metadata); the rule is then skipped, and counted as no_key. The key is an
// identity, not a Redis key: the interceptor prefixes it with the rule's
// name and hashes it when it is long.
type KeyFunc func(c *Call) (key string, ok bool)

// Method returns the call's full method name: a quota per method.
func Method() KeyFunc {
	return func(c *Call) (string, bool) { return c.FullMethod, c.FullMethod != "" }
}

// Service returns the call's service, "/package.Service": a quota shared
// by its methods.
func Service() KeyFunc {
	return func(c *Call) (string, bool) {
		s, _, ok := cutMethod(c.FullMethod)
		return s, ok
	}
}

// cutMethod splits "/pkg.Service/Method" into "/pkg.Service" and "Method".
func cutMethod(full string) (service, method string, ok bool) {
	i := strings.LastIndexByte(full, '/')
	if i <= 0 {
		return "", "", false
	}
	return full[:i], full[i+1:], true
}

// Metadata returns the first value of the incoming metadata key name
// (case-insensitive), when it is not empty. Example: Metadata("x-tenant-id").
// The value is sent by the client: use it only for identities the server
// checks elsewhere, or where a client choosing its own key is harmless.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(c *Call) (string, bool) {
		md, _ := metadata.FromIncomingContext(c.Ctx)
		if v := md.Get(name); len(v) > 0 && v[0] != "" {
			return v[0], true
		}
		return "", false
	}
}

// MetadataDigest is Metadata keyed by the SHA-256 of the value, truncated
// to 128 bits, so secrets such as API keys never appear in Redis key
// names, logs or metrics. An "authorization: Bearer <t>" value is keyed by
// the token. Example: MetadataDigest("x-api-key").
func MetadataDigest(name string) KeyFunc {
	meta := Metadata(name)
	return func(c *Call) (string, bool) {
		v, ok := meta(c)
		v = strings.TrimSpace(v)
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			v = strings.TrimSpace(v[7:])
		}
		if !ok || v == "" {
			return "", false
		}
		return ruleset.Digest(v), true
	}
}

// Default prefix lengths PeerIP masks addresses to: an IPv6 client usually
// holds a whole /64.
const (
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)

// PeerIP returns the peer's IP address, IPv6 ones masked to their /64:
// "203.0.113.7", "2001:db8:1:2::/64". A call over a Unix socket, or without
// a peer, has no key. Behind a proxy the peer is the proxy: key by the
// metadata the proxy sets instead, if it overwrites what clients send.
func PeerIP() KeyFunc { return PeerPrefix(DefaultIPv4Prefix, DefaultIPv6Prefix) }

// PeerPrefix is PeerIP with other masks: PeerPrefix(24, 48) keys clients
// by their IPv4 /24 and IPv6 /48. Prefixes outside 1 to 32 (IPv4) or 1 to
// 128 (IPv6) are taken as the full address.
func PeerPrefix(ipv4, ipv6 int) KeyFunc {
	if ipv4 < 1 || ipv4 > 32 {
		ipv4 = 32
	}
	if ipv6 < 1 || ipv6 > 128 {
		ipv6 = 128
	}
	return func(c *Call) (string, bool) {
		p, ok := peer.FromContext(c.Ctx)
		if !ok || p.Addr == nil {
			return "", false
		}
		var a netip.Addr
		switch addr := p.Addr.(type) {
		case *net.TCPAddr:
			a, _ = netip.AddrFromSlice(addr.IP)
		default:
			ap, err := netip.ParseAddrPort(p.Addr.String())
			if err != nil {
				return "", false
			}
			a = ap.Addr()
		}
		if !a.IsValid() {
			return "", false
		}
		a = a.Unmap()
		bits := ipv6
		if a.Is4() {
			bits = ipv4
		}
		if bits == a.BitLen() {
			return a.String(), true
		}
		pfx, err := a.Prefix(bits)
		if err != nil {
			return "", false
		}
		return pfx.String(), true
	}
}

// Static returns the same key for every call: one quota shared by all
// clients, such as a cap on an expensive method. Example: Static("export").
func Static(key string) KeyFunc {
	return func(*Call) (string, bool) { return key, key != "" }
}

// Methods matches calls to the named methods: full names such as
// "/pkg.Service/Method", or a service followed by "/*" for all its
// methods. Example: Exempt: Methods("/grpc.health.v1.Health/*").
func Methods(names ...string) func(*Call) bool {
	exact := map[string]bool{}
	var services []string
	for _, n := range names {
		if s, ok := strings.CutSuffix(n, "/*"); ok {
			services = append(services, s+"/")
		} else {
			exact[n] = true
		}
	}
	return func(c *Call) bool {
		if exact[c.FullMethod] {
			return true
		}
		for _, s := range services {
			if strings.HasPrefix(c.FullMethod, s) {
				return true
			}
		}
		return false
	}
}

// Streams matches streaming calls, for a rule of its own on them.
func Streams() func(*Call) bool { return func(c *Call) bool { return c.Stream } }
