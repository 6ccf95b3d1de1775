package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The config types decode with yaml.v3 and encoding/json by their standard
// struct tags, so they embed in an application's own config; Duration and
// StringList take the short forms a file writes ("1m", "ip"). Parse
// reads both formats with yaml.v3 (JSON is YAML), its Decoder.KnownFields
// on, and names the field of each error it reports: yaml.v3 gives the line,
// the value and the Go type, which find the field in the document.

// Duration is a time.Duration that a config writes as a Go duration string
// ("1m", "1h30m", "250ms") or a number of seconds (60, 0.5).
type Duration time.Duration

// String returns the duration as time.Duration writes it, "1m0s".
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML reads a duration string or a number of seconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var err error
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		err = d.parse(n.Value, strconv.Quote(n.Value))
	case n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float"):
		err = d.seconds(n.Value)
	default:
		err = durationError(describeNode(n))
	}
	return nodeError(n, err)
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
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		*l = StringList{n.Value}
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return nodeError(n, fmt.Errorf("want a string or a list of strings, got %s", describeNode(n)))
	}
	out := make(StringList, len(n.Content))
	for i, c := range n.Content {
		if c.Kind != yaml.ScalarNode || c.ShortTag() != "!!str" {
			return nodeError(c, fmt.Errorf("want a string, got %s", describeNode(c)))
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

// nodeError is err at node n, as yaml.v3 reports a value it cannot decode:
// a *yaml.TypeError, with n's line and column, which the decoder adds to
// its own and Parse turns into the field's path.
func nodeError(n *yaml.Node, err error) error {
	if err == nil {
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d, column %d: %v", n.Line, n.Column, err)}}
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
	n := 0
	if err := measure(doc.Content[0], &n, 0); err != nil {
		return pathError("", fmt.Errorf("%s: %w", format, err))
	}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	err := strict.Decode(c)
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		return explain(doc.Content[0], te.Errors[0])
	}
	if err != nil {
		return pathError("", fmt.Errorf("%s: %w", format, err))
	}
	return checkScalars(doc.Content[0])
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// checkScalars refuses what yaml.v3 decodes leniently: a fraction into an
// integer (1.5 would be 1), a string into a bool ("yes" would be true), a
// number or null into a string. Each scalar must carry the tag of its
// field's kind; Duration and StringList check their own.
func checkScalars(root *yaml.Node) error {
	var out error
	walk(root, reflect.TypeFor[Config](), "", func(n, key *yaml.Node, t reflect.Type, _, path string) bool {
		if key != nil || n.Kind != yaml.ScalarNode || reflect.PointerTo(t).Implements(unmarshalerType) {
			return false
		}
		want := map[reflect.Kind]string{reflect.Bool: "!!bool", reflect.String: "!!str", reflect.Int: "!!int", reflect.Int64: "!!int"}[t.Kind()]
		if want != "" && n.ShortTag() != want {
			out = pathError(path, fmt.Errorf("want %s, got %s (line %d)", describeType(t), describeNode(n), n.Line))
			return true
		}
		return false
	})
	return out
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

// measure bounds the nodes, aliases expanded, and the depth of a document,
// and refuses merge keys and keys that are not plain names.
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

// The messages of yaml.v3's decoder that explain reads, after "line N: "
// (or "line N, column C: " from nodeError).
var (
	yamlAt        = regexp.MustCompile(`^line (\d+)(?:, column (\d+))?: (.*)$`)
	yamlUnknown   = regexp.MustCompile(`^field (.*) not found in type (\S+)$`)
	yamlDuplicate = regexp.MustCompile(`^mapping key "(.*)" already defined at line \d+$`)
	yamlMistyped  = regexp.MustCompile("^cannot unmarshal (!!\\w+)(?: `.*`)? into (\\S+)$")
)

// explain turns one of yaml.v3's messages about the document root into a
// *Error at the field it concerns: the node at the message's line
// (and column) that fits what the message says, with the Go type the
// field decodes into.
func explain(root *yaml.Node, msg string) error {
	m := yamlAt.FindStringSubmatch(msg)
	if m == nil {
		return pathError("", errors.New(msg))
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	text := m[3]
	var out error
	walk(root, reflect.TypeFor[Config](), "", func(n, key *yaml.Node, t reflect.Type, parent, path string) bool {
		switch {
		case key != nil && key.Line == line:
			if u := yamlUnknown.FindStringSubmatch(text); u != nil && u[1] == key.Value && u[2] == t.String() {
				out = pathError(join(path, key.Value), fmt.Errorf("unknown field (line %d)", line))
				return true
			}
			if d := yamlDuplicate.FindStringSubmatch(text); d != nil && d[1] == key.Value {
				out = pathError(path, fmt.Errorf("line %d: duplicate field %q", line, key.Value))
				return true
			}
		case key == nil && n.Line == line && (col == 0 || n.Column == col):
			if col != 0 {
				out = pathError(path, fmt.Errorf("%s (line %d)", text, line))
				return true
			}
			if w := yamlMistyped.FindStringSubmatch(text); w != nil && w[1] == n.ShortTag() && w[2] == t.String() {
				out = pathError(path, fmt.Errorf("want %s, got %s (line %d)", describeType(t), describeNode(n), line))
				return true
			}
		}
		return false
	})
	if out == nil {
		return pathError("", errors.New(msg))
	}
	return out
}

// walk visits node, which decodes into a t at path, and what it holds:
// each mapping key (with key set, t the mapping's type) before its value.
// It stops when visit returns true, and reports whether it did.
func walk(n *yaml.Node, t reflect.Type, path string, visit func(n, key *yaml.Node, t reflect.Type, parent, path string) bool) bool {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if visit(n, nil, t, "", path) {
		return true
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.MappingNode && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map):
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if visit(v, k, t, path, path) {
				return true
			}
			ft, ok := fieldType(t, k.Value)
			if ok && walk(v, ft, join(path, k.Value), visit) {
				return true
			}
		}
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for i, c := range n.Content {
			if walk(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), visit) {
				return true
			}
		}
	}
	return false
}

// fieldType is the type of the field or map value named name in t.
func fieldType(t reflect.Type, name string) (reflect.Type, bool) {
	if t.Kind() == reflect.Map {
		return t.Elem(), true
	}
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag == name {
			return t.Field(i).Type, true
		}
	}
	return nil, false
}

// describeType names what a field of type t takes, in errors.
func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice:
		return "a list"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	}
	return t.String()
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
