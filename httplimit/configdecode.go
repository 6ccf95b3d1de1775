package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The config types decode with yaml.v3 and encoding/json by their standard
// struct tags, so they embed in an application's own config; Duration and
// StringList take the short forms a file writes ("1m", "ip"). ParseConfig
// reads both formats through one YAML node tree (JSON is YAML) and decodes
// it field by field, so that it can reject unknown, duplicate and
// mistyped fields with the path of each (rules[0].burts: unknown field),
// which the standard decoders' errors do not name.

// Duration is a time.Duration that a config writes as a Go duration string
// ("1m", "1h30m", "250ms") or a number of seconds (60, 0.5).
type Duration time.Duration

// String returns the duration as time.Duration writes it, "1m0s".
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML reads a duration string or a number of seconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		return durationError(describeNode(n))
	}
	switch n.ShortTag() {
	case "!!str":
		return d.parse(n.Value, strconv.Quote(n.Value))
	case "!!int", "!!float":
		return d.seconds(n.Value)
	}
	return durationError(describeNode(n))
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalJSON reads a duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		return d.parse(s, strconv.Quote(s))
	}
	var num json.Number
	if err := json.Unmarshal(b, &num); err != nil {
		return durationError(string(b))
	}
	return d.seconds(num.String())
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) parse(s, shown string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return durationError(shown)
	}
	*d = Duration(v)
	return nil
}

// seconds reads a decimal number of seconds, rounded to the nanosecond:
// 1.001 is 1.001s, not the float product's 1.000999999s.
func (d *Duration) seconds(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.Abs(f) > float64(math.MaxInt64/int64(time.Second)) {
		return durationError(s)
	}
	*d = Duration(math.Round(f * float64(time.Second)))
	return nil
}

func durationError(got string) error {
	return fmt.Errorf("want a duration such as \"1m\" or a number of seconds, got %s", got)
}

// StringList is a list of strings that a config may write as one string:
// key: ip is key: [ip].
type StringList []string

// UnmarshalYAML reads a string or a list of strings.
func (l *StringList) UnmarshalYAML(n *yaml.Node) error {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		*l = StringList{n.Value}
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("want a string or a list of strings, got %s", describeNode(n))
	}
	out := make(StringList, len(n.Content))
	for i, c := range n.Content {
		c = resolve(c)
		if c.Kind != yaml.ScalarNode || c.ShortTag() != "!!str" {
			return fmt.Errorf("[%d]: want a string, got %s", i, describeNode(c))
		}
		out[i] = c.Value
	}
	*l = out
	return nil
}

// UnmarshalJSON reads a string or a list of strings.
func (l *StringList) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*l = StringList{s}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("want a string or a list of strings, got %s", b)
	}
	*l = list
	return nil
}

// maxNodes bounds the nodes a document may expand to (YAML aliases can
// multiply a small file), and maxDepth its nesting.
const (
	maxNodes = 100_000
	maxDepth = 32
)

// decodeConfig parses data in format and fills c, naming the field of
// every error.
func decodeConfig(data []byte, format Format, c *Config) error {
	if format == JSON {
		if err := checkJSON(data); err != nil {
			return pathError("", fmt.Errorf("json: %w", err))
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return pathError("", fmt.Errorf("%s: empty document", format))
		}
		return pathError("", fmt.Errorf("%s: %w", format, err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return pathError("", fmt.Errorf("%s: more than one document", format))
	}
	if len(doc.Content) == 0 {
		return pathError("", fmt.Errorf("%s: empty document", format))
	}
	root := doc.Content[0]
	n := 0
	if err := measure(root, &n, 0); err != nil {
		return pathError("", fmt.Errorf("%s: %w", format, err))
	}
	return fill(reflect.ValueOf(c).Elem(), root, "")
}

// checkJSON reports a JSON syntax error with its line and column, or data
// after the value: the YAML parser would take some of those for YAML.
func checkJSON(data []byte) error {
	d := json.NewDecoder(bytes.NewReader(data))
	var v json.RawMessage
	if err := d.Decode(&v); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return jsonPosition(data, d, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return jsonPosition(data, d, errors.New("data after the top-level value"))
	}
	return nil
}

// jsonPosition adds the line and column of the decoder's position to err.
func jsonPosition(data []byte, d *json.Decoder, err error) error {
	off := d.InputOffset()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = se.Offset
	}
	off = min(max(off, 0), int64(len(data)))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - int64(bytes.LastIndexByte(data[:off], '\n'))
	return fmt.Errorf("line %d, column %d: %w", line, col, err)
}

// measure bounds the nodes, aliases expanded, and the depth of a document.
func measure(n *yaml.Node, count *int, depth int) error {
	if *count++; *count > maxNodes {
		return fmt.Errorf("more than %d values (aliases included)", maxNodes)
	}
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d", maxDepth)
	}
	if n.Kind == yaml.AliasNode {
		return measure(n.Alias, count, depth+1)
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return fmt.Errorf("line %d: only plain field names are supported", k.Line)
			}
		}
	}
	for _, c := range n.Content {
		if err := measure(c, count, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// resolve follows aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

var (
	durationType   = reflect.TypeFor[Duration]()
	stringListType = reflect.TypeFor[StringList]()
)

// fill decodes node into dst, by the yaml tags of structs; path names node
// in errors.
func fill(dst reflect.Value, node *yaml.Node, path string) error {
	node = resolve(node)
	switch {
	case dst.Type() == durationType:
		if err := dst.Addr().Interface().(*Duration).UnmarshalYAML(node); err != nil {
			return pathError(path, err)
		}
		return nil
	case dst.Type() == stringListType && node.Kind == yaml.ScalarNode && node.ShortTag() == "!!str":
		dst.Set(reflect.ValueOf(StringList{node.Value})) // a lone string is a list of one
		return nil
	}
	switch dst.Kind() {
	case reflect.Struct:
		fields := map[string]int{}
		for i := range dst.NumField() {
			if tag, _, _ := strings.Cut(dst.Type().Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
				fields[tag] = i
			}
		}
		return eachField(node, path, func(k string, v *yaml.Node) error {
			i, ok := fields[k]
			if !ok {
				return pathError(join(path, k), errors.New("unknown field"))
			}
			return fill(dst.Field(i), v, join(path, k))
		})
	case reflect.Slice:
		if node.Kind != yaml.SequenceNode {
			return pathError(path, fmt.Errorf("want a list, got %s", describeNode(node)))
		}
		out := reflect.MakeSlice(dst.Type(), len(node.Content), len(node.Content))
		for i, e := range node.Content {
			if err := fill(out.Index(i), e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		dst.Set(out)
		return nil
	case reflect.Map:
		out := reflect.MakeMap(dst.Type())
		err := eachField(node, path, func(k string, v *yaml.Node) error {
			e := reflect.New(dst.Type().Elem()).Elem()
			if err := fill(e, v, join(path, k)); err != nil {
				return err
			}
			out.SetMapIndex(reflect.ValueOf(k), e)
			return nil
		})
		dst.Set(out)
		return err
	case reflect.String:
		if node.Kind != yaml.ScalarNode || node.ShortTag() != "!!str" {
			return pathError(path, fmt.Errorf("want a string, got %s", describeNode(node)))
		}
		dst.SetString(node.Value)
		return nil
	case reflect.Bool:
		var b bool
		if node.Kind != yaml.ScalarNode || node.ShortTag() != "!!bool" || node.Decode(&b) != nil {
			return pathError(path, fmt.Errorf("want true or false, got %s", describeNode(node)))
		}
		dst.SetBool(b)
		return nil
	case reflect.Int, reflect.Int64:
		var i int64
		if node.Kind != yaml.ScalarNode || node.ShortTag() != "!!int" || node.Decode(&i) != nil {
			return pathError(path, fmt.Errorf("want an integer, got %s", describeNode(node)))
		}
		if dst.OverflowInt(i) {
			return pathError(path, fmt.Errorf("%d is out of range", i))
		}
		dst.SetInt(i)
		return nil
	}
	return pathError(path, fmt.Errorf("unsupported field type %s", dst.Type()))
}

// eachField calls fn for each field of the mapping node, in order,
// refusing anything but a mapping with distinct plain names.
func eachField(node *yaml.Node, path string, fn func(k string, v *yaml.Node) error) error {
	if node.Kind != yaml.MappingNode {
		return pathError(path, fmt.Errorf("want an object, got %s", describeNode(node)))
	}
	seen := make(map[string]bool, len(node.Content)/2)
	for i := 0; i+1 < len(node.Content); i += 2 {
		kn := resolve(node.Content[i])
		if kn.Kind != yaml.ScalarNode || kn.ShortTag() == "!!merge" {
			return pathError(path, fmt.Errorf("line %d: only plain field names are supported", kn.Line))
		}
		if seen[kn.Value] {
			return pathError(path, fmt.Errorf("line %d: duplicate field %q", kn.Line, kn.Value))
		}
		seen[kn.Value] = true
		if err := fn(kn.Value, node.Content[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// describeNode names a node's value in errors: "an object", "a list",
// "null", a quoted string or a literal.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "an object"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!null":
		return "null"
	case "!!str":
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// join names a field of the object at path: path.field, or path["fi.eld"]
// for a name that would read as a path.
func join(path, field string) string {
	switch {
	case field == "" || strings.ContainsAny(field, ".[]\" \t\n"):
		return path + "[" + strconv.Quote(field) + "]"
	case path == "":
		return field
	}
	return path + "." + field
}
