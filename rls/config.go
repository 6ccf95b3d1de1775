package rls

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/hybridlimit/hybridlimit"
)

// ErrConfig is wrapped by every error LoadConfig returns.
var ErrConfig = errors.New("rls: config")

// File is one rules file: a name for errors (its path under the runtime
// directory) and its YAML text.
type File struct {
	Name string
	Data []byte
}

// Config is a loaded set of rules: one tree of descriptors per domain. It is
// immutable once loaded, so a reload swaps in a new Config while requests
// keep reading the old one.
type Config struct {
	domains map[string]*node
	files   []string
}

// node is one level of a domain's descriptor tree.
type node struct {
	children  map[string]*node // by composite key: "key" or "key_value"
	wildcards []wildcard       // composite keys containing '*', in the order declared
	rule      *Rule            // nil when the level sets no rate_limit
	// valueToMetric puts the request's value in the stat key of a level
	// matched by its bare key or a wildcard.
	valueToMetric bool
	// share is set on a wildcard level with share_threshold: every value
	// it matches counts against one counter, named by the pattern.
	share bool
}

// wildcard is a composite key with '*' in it, split at the stars.
type wildcard struct {
	key   string
	parts []string
}

// Rule is a rate_limit of the YAML, or a descriptor's limit override.
type Rule struct {
	// FullKey names the rule as the reference's stats do:
	// domain.key_value.key..., the composite keys of its path.
	FullKey         string
	RequestsPerUnit uint32
	Unit            Unit
	// Period is the unit's length times Multiplier, an override's
	// unit_multiplier (0 for a configured rule: one unit).
	Period         time.Duration
	Multiplier     uint32
	Unlimited      bool
	Shadow         bool
	Quota          bool
	DetailedMetric bool
	Name           string
	Replaces       []string
	Metadata       *structpb.Struct
	// override marks a rule made from a request's limit override.
	override bool
}

// limit is the token bucket a rule means to the hybrid limiter: rpu tokens
// per period, rpu at once. ok is false for requests_per_unit 0, which denies
// every request without a bucket.
func (r *Rule) limit() (l hybridlimit.Limit, ok bool) {
	if r.RequestsPerUnit == 0 {
		return hybridlimit.Limit{}, false
	}
	n := int64(r.RequestsPerUnit)
	return hybridlimit.Limit{Rate: n, Period: r.Period, Burst: n}, true
}

// validKeys are the YAML keys the format has; any other is a load error.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true, "metadata": true,
}

type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	Metadata       map[string]any   `yaml:"metadata"`
	line           int
}

// UnmarshalYAML records the line a descriptor starts on, for errors.
func (d *yamlDescriptor) UnmarshalYAML(n *yaml.Node) error {
	type plain yamlDescriptor
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*d = yamlDescriptor(p)
	d.line = n.Line
	return nil
}

type yamlRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
}

type yamlReplaces struct {
	Name string `yaml:"name"`
}

// LoadConfig parses and checks rules files. Each file holds one domain;
// two files with one domain are an error unless merge is set, when their
// descriptors join one tree (a composite key defined twice is still an
// error). The errors name the file and, where it helps, the line.
func LoadConfig(files []File, merge bool) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		if err := c.load(f, merge); err != nil {
			return nil, err
		}
		c.files = append(c.files, f.Name)
	}
	return c, nil
}

func (c *Config) load(f File, merge bool) error {
	fail := failer(f.Name)
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Data, &doc); err != nil {
		return fail(0, "%v", err)
	}
	if len(doc.Content) > 0 {
		if err := checkKeys(doc.Content[0], fail); err != nil {
			return err
		}
	}
	var root yamlRoot
	if err := doc.Decode(&root); err != nil && len(doc.Content) > 0 {
		return fail(0, "%v", err)
	}
	return c.add(root, merge, fail)
}

// failer returns the error maker of one source of rules (a file, an xDS
// resource): its errors wrap ErrConfig and name the source and the line
// (0: no line).
func failer(source string) func(line int, format string, args ...any) error {
	return func(line int, format string, args ...any) error {
		where := source
		if line > 0 {
			where = fmt.Sprintf("%s:%d", source, line)
		}
		return fmt.Errorf("%w: %s: %s", ErrConfig, where, fmt.Sprintf(format, args...))
	}
}

// add checks one domain's rules and adds them to c, into the domain's tree
// if merge is set and the domain is there already.
func (c *Config) add(root yamlRoot, merge bool, fail func(int, string, ...any) error) error {
	if root.Domain == "" {
		return fail(0, "no domain (or an empty one)")
	}
	dom, dup := c.domains[root.Domain]
	if dup && !merge {
		return fail(0, "domain %q is defined again (set MERGE_DOMAIN_CONFIG=true to merge files of one domain)", root.Domain)
	}
	if !dup {
		dom = &node{children: map[string]*node{}}
	}
	if err := dom.load(root.Descriptors, root.Domain+".", fail); err != nil {
		return err
	}
	c.domains[root.Domain] = dom
	return nil
}

// checkKeys walks a YAML document and refuses keys the format does not
// have, and list elements that are not mappings. What metadata holds is
// free-form.
func checkKeys(n *yaml.Node, fail func(int, string, ...any) error) error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return fail(k.Line, "a key must be a string, not %s", k.Tag)
			}
			if !validKeys[k.Value] {
				return fail(k.Line, "unknown key %q", k.Value)
			}
			if k.Value == "metadata" {
				if v.Kind != yaml.MappingNode && !(v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
					return fail(v.Line, "metadata must be a mapping")
				}
				continue
			}
			if err := checkKeys(v, fail); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if e.Kind != yaml.MappingNode {
				return fail(e.Line, "a list may hold only mappings, not %s", e.Tag)
			}
			if err := checkKeys(e, fail); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		return checkKeys(n.Alias, fail)
	case yaml.ScalarNode:
		if n.Tag == "!!float" {
			return fail(n.Line, "%s is not a whole number", n.Value)
		}
	}
	return nil
}

func (n *node) load(ds []yamlDescriptor, parent string, fail func(int, string, ...any) error) error {
	for _, d := range ds {
		if d.Key == "" {
			return fail(d.line, "a descriptor has no key")
		}
		composite := d.Key
		if d.Value != "" {
			composite += "_" + d.Value
		}
		full := parent + composite
		if _, dup := n.children[composite]; dup {
			return fail(d.line, "composite key %q is defined twice", full)
		}
		child := &node{children: map[string]*node{}, valueToMetric: d.ValueToMetric}
		if rl := d.RateLimit; rl != nil {
			r, err := ruleOf(rl, full, d)
			if err != nil {
				return fail(d.line, "%s", err)
			}
			child.rule = r
		}
		wild := strings.Contains(composite, "*")
		if d.ShareThreshold && !wild {
			return fail(d.line, "share_threshold needs a wildcard ('*') in the value, and %q has none", full)
		}
		child.share = d.ShareThreshold
		if wild {
			n.wildcards = append(n.wildcards, wildcard{key: composite, parts: strings.Split(composite, "*")})
		}
		if err := child.load(d.Descriptors, full+".", fail); err != nil {
			return err
		}
		n.children[composite] = child
	}
	return nil
}

func ruleOf(rl *yamlRateLimit, full string, d yamlDescriptor) (*Rule, error) {
	r := &Rule{
		FullKey:         full,
		RequestsPerUnit: rl.RequestsPerUnit,
		Unlimited:       rl.Unlimited,
		Shadow:          d.ShadowMode,
		Quota:           d.QuotaMode,
		DetailedMetric:  d.DetailedMetric,
		Name:            rl.Name,
	}
	unit, valid := parseUnit(rl.Unit)
	switch {
	case rl.Unlimited && valid:
		return nil, fmt.Errorf("%q is unlimited and has a unit (%s): give one or the other", full, rl.Unit)
	case !rl.Unlimited && !valid:
		return nil, fmt.Errorf("%q has unit %q: want second, minute, hour, day, week, month or year", full, rl.Unit)
	case valid:
		r.Unit = unit
		p, err := periodOf(unit, 1)
		if err != nil {
			return nil, err
		}
		r.Period = p
	}
	for _, rep := range rl.Replaces {
		switch rep.Name {
		case "":
			return nil, fmt.Errorf("%q has a replaces entry without a name", full)
		case rl.Name:
			return nil, fmt.Errorf("%q replaces itself (%q)", full, rl.Name)
		}
		r.Replaces = append(r.Replaces, rep.Name)
	}
	if len(d.Metadata) > 0 {
		md, err := structpb.NewStruct(d.Metadata)
		if err != nil {
			return nil, fmt.Errorf("%q has metadata that is not a JSON object: %v", full, err)
		}
		r.Metadata = md
	}
	return r, nil
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// Files returns the names of the files the config was loaded from.
func (c *Config) Files() []string { return c.files }

// Dump renders the rules one a line, sorted, in the reference's /rlconfig
// format: "domain.key_value: unit=MINUTE requests_per_unit=20, shadow_mode:
// false, quota_mode: false".
func (c *Config) Dump() string {
	var lines []string
	var walk func(n *node)
	walk = func(n *node) {
		if r := n.rule; r != nil {
			line := fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t", r.FullKey, r.Unit, r.RequestsPerUnit, r.Shadow, r.Quota)
			if r.Unlimited {
				line += ", unlimited: true"
			}
			lines = append(lines, line)
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	for _, d := range c.domains {
		walk(d)
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
