package rls

import (
	"strings"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Match returns the rule a descriptor of a request to domain gets, nil when
// none applies (the domain is not configured, or no rule matches); a
// descriptor with a limit override gets a rule made from it. Matching is
// the reference's, as lookup says.
func (c *Config) Match(domain string, d *rlpb.RateLimitDescriptor) *Rule {
	m, _ := c.lookup(domain, d)
	return m.rule
}

// match is the rule a request descriptor matched, with what the request adds
// to it: the stat key its hits count under, and, per entry, the wildcard
// pattern that stands for the entry's value when share_threshold makes
// every matching value share one counter ("" for the others; nil when no
// entry shares).
type match struct {
	rule    *Rule
	statKey string
	share   []string
}

// lookup finds the rule for one descriptor of a request to domain. known
// reports whether the domain is configured; a descriptor of an unknown
// domain, or one that matches no rule, has a nil rule. A descriptor with a
// limit override gets a rule made from the override, but only in a known
// domain.
//
// Matching walks the tree one entry at a time: at each level the composite
// key "key_value" is tried first, then the level's wildcard keys in the
// order they were declared ('*' matches any run of bytes), then the bare
// key. The rule is the one set at the level of the last entry: a rule
// deeper or shallower than the descriptor does not apply.
func (c *Config) lookup(domain string, d *rlpb.RateLimitDescriptor) (m match, known bool) {
	n := c.domains[domain]
	if n == nil {
		return match{}, false
	}
	if d.GetLimit() != nil {
		return match{rule: &Rule{override: true}, statKey: descriptorKey(domain, d)}, true
	}
	entries := d.GetEntries()
	var stat, detailed strings.Builder
	stat.WriteString(domain)
	detailed.WriteString(domain)
	for i, e := range entries {
		composite := e.GetKey() + "_" + e.GetValue()
		detailed.WriteString(".")
		detailed.WriteString(composite)

		next := n.children[composite]
		statValue := e.GetValue() // the value the stat key shows for this level
		if next == nil {
			if w, ok := n.matchWildcard(composite); ok {
				next = n.children[w]
				pattern := strings.TrimPrefix(w, e.GetKey()+"_")
				switch {
				case next.share:
					if m.share == nil {
						m.share = make([]string, len(entries))
					}
					m.share[i] = pattern
					statValue = pattern
				case !next.valueToMetric:
					statValue = pattern
				}
			}
		}
		if next == nil {
			next = n.children[e.GetKey()]
			if next != nil && !next.valueToMetric {
				statValue = ""
			}
		}
		stat.WriteString(".")
		stat.WriteString(e.GetKey())
		if next == nil {
			break
		}
		if statValue != "" {
			stat.WriteString("_")
			stat.WriteString(statValue)
		}
		if i == len(entries)-1 {
			m.rule = next.rule
		}
		if len(next.children) == 0 {
			break
		}
		n = next
	}
	if m.rule == nil {
		return match{}, true
	}
	switch {
	case m.rule.DetailedMetric && m.share != nil:
		m.statKey = shareStatKey(domain, entries, m.share)
	case m.rule.DetailedMetric:
		m.statKey = detailed.String()
	default:
		m.statKey = stat.String()
	}
	return m, true
}

// matchWildcard returns the first wildcard key of n that composite matches.
func (n *node) matchWildcard(composite string) (string, bool) {
	for _, w := range n.wildcards {
		if globMatch(w.parts, composite) {
			return w.key, true
		}
	}
	return "", false
}

// globMatch reports whether s matches a pattern split at its stars: s
// starts with the first part, ends with the last, and holds the others in
// order between them, each star standing for any run of bytes, empty
// included.
func globMatch(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// shareStatKey is the detailed stat key of a descriptor some of whose
// entries share a counter: those show their pattern, the others their value.
func shareStatKey(domain string, entries []*rlpb.RateLimitDescriptor_Entry, share []string) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteString(".")
		b.WriteString(e.GetKey())
		switch {
		case share[i] != "":
			b.WriteString("_")
			b.WriteString(share[i])
		case e.GetValue() != "":
			b.WriteString("_")
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}

// descriptorKey is the stat key of a limit override: the domain and each
// entry as key_value (key alone for an empty value), joined by dots.
func descriptorKey(domain string, d *rlpb.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	b.WriteString(".")
	for i, e := range d.GetEntries() {
		if i > 0 {
			b.WriteString(".")
		}
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteString("_")
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}
