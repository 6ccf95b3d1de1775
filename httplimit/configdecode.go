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

// The config decoder reads JSON or YAML into one generic tree (object,
// []any, number, string, bool, nil), then fills the Config structs from it by
// their `config` tags, so both formats share one schema, reject unknown and
// duplicate fields alike, and name the field of every error by its path.

// object is a JSON or YAML mapping, keys in document order.
type object struct {
	keys []string
	vals map[string]any
}

// number is a numeric literal, kept as text until its field's type is known.
type number string

// maxNodes bounds the nodes a document may expand to (YAML aliases can
// multiply a small file), and maxDepth its nesting.
const (
	maxNodes = 100_000
	maxDepth = 32
)

// jsonTree parses one JSON value, and nothing after it.
func jsonTree(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	n := 0
	v, err := jsonValue(d, &n, 0)
	if err != nil {
		return nil, jsonPosition(data, d, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, jsonPosition(data, d, errors.New("data after the top-level value"))
	}
	return v, nil
}

func jsonValue(d *json.Decoder, n *int, depth int) (any, error) {
	if *n++; *n > maxNodes {
		return nil, fmt.Errorf("more than %d values", maxNodes)
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	tok, err := d.Token()
	if err != nil {
		if err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			list := []any{}
			for d.More() {
				v, err := jsonValue(d, n, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			return list, closeDelim(d)
		}
		obj := &object{vals: map[string]any{}}
		for d.More() {
			kt, err := d.Token()
			if err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string) // the decoder only yields string keys
			if _, dup := obj.vals[k]; dup {
				return nil, fmt.Errorf("duplicate field %q", k)
			}
			v, err := jsonValue(d, n, depth+1)
			if err != nil {
				return nil, err
			}
			obj.keys = append(obj.keys, k)
			obj.vals[k] = v
		}
		return obj, closeDelim(d)
	case json.Number:
		return number(t), nil
	default: // string, bool, nil
		return t, nil
	}
}

// closeDelim reads the ']' or '}' that ends a list or object.
func closeDelim(d *json.Decoder) error {
	_, err := d.Token()
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
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

// yamlTree parses one YAML document.
func yamlTree(data []byte) (any, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, errors.New("empty document")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, errors.New("more than one document")
	}
	n := 0
	return yamlValue(&doc, &n, 0)
}

func yamlValue(node *yaml.Node, n *int, depth int) (any, error) {
	if *n++; *n > maxNodes {
		return nil, fmt.Errorf("more than %d values (aliases included)", maxNodes)
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	switch node.Kind {
	case yaml.DocumentNode:
		if len(node.Content) == 0 {
			return nil, errors.New("empty document")
		}
		return yamlValue(node.Content[0], n, depth)
	case yaml.AliasNode:
		return yamlValue(node.Alias, n, depth+1)
	case yaml.SequenceNode:
		list := make([]any, 0, len(node.Content))
		for _, c := range node.Content {
			v, err := yamlValue(c, n, depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	case yaml.MappingNode:
		obj := &object{vals: map[string]any{}}
		for i := 0; i+1 < len(node.Content); i += 2 {
			kn := node.Content[i]
			if kn.Kind != yaml.ScalarNode || kn.Tag == "!!merge" {
				return nil, fmt.Errorf("line %d: only plain field names are supported", kn.Line)
			}
			k := kn.Value
			if _, dup := obj.vals[k]; dup {
				return nil, fmt.Errorf("line %d: duplicate field %q", kn.Line, k)
			}
			v, err := yamlValue(node.Content[i+1], n, depth+1)
			if err != nil {
				return nil, err
			}
			obj.keys = append(obj.keys, k)
			obj.vals[k] = v
		}
		return obj, nil
	case yaml.ScalarNode:
		switch node.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := node.Decode(&b); err != nil {
				return nil, fmt.Errorf("line %d: %w", node.Line, err)
			}
			return b, nil
		case "!!int", "!!float":
			return number(node.Value), nil
		default:
			return node.Value, nil
		}
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", node.Line)
}

// Duration is a time.Duration that a config file writes as a Go duration
// string ("1m", "1h30m", "250ms") or a number of seconds (60, 0.5).
type Duration time.Duration

var durationType = reflect.TypeFor[Duration]()

// fill decodes the tree v into the value dst points at, by the `config`
// tags of structs; path names v in errors.
func fill(dst reflect.Value, v any, path string) error {
	if dst.Type() == durationType {
		d, err := toDuration(v)
		if err != nil {
			return pathError(path, err)
		}
		dst.SetInt(int64(d))
		return nil
	}
	switch dst.Kind() {
	case reflect.Struct:
		obj, ok := v.(*object)
		if !ok {
			return pathError(path, fmt.Errorf("want an object, got %s", describe(v)))
		}
		fields := map[string]int{}
		for i := range dst.NumField() {
			if tag := dst.Type().Field(i).Tag.Get("config"); tag != "" {
				fields[tag] = i
			}
		}
		for _, k := range obj.keys {
			i, ok := fields[k]
			if !ok {
				return pathError(join(path, k), errors.New("unknown field"))
			}
			if err := fill(dst.Field(i), obj.vals[k], join(path, k)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			if s, isStr := v.(string); isStr && dst.Type().Elem().Kind() == reflect.String {
				list = []any{s} // a lone string is a list of one
			} else {
				return pathError(path, fmt.Errorf("want a list, got %s", describe(v)))
			}
		}
		out := reflect.MakeSlice(dst.Type(), len(list), len(list))
		for i, e := range list {
			if err := fill(out.Index(i), e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		dst.Set(out)
		return nil
	case reflect.Map:
		obj, ok := v.(*object)
		if !ok {
			return pathError(path, fmt.Errorf("want an object, got %s", describe(v)))
		}
		out := reflect.MakeMapWithSize(dst.Type(), len(obj.keys))
		for _, k := range obj.keys {
			e := reflect.New(dst.Type().Elem()).Elem()
			if err := fill(e, obj.vals[k], join(path, k)); err != nil {
				return err
			}
			out.SetMapIndex(reflect.ValueOf(k), e)
		}
		dst.Set(out)
		return nil
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			return pathError(path, fmt.Errorf("want a string, got %s", describe(v)))
		}
		dst.SetString(s)
		return nil
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			return pathError(path, fmt.Errorf("want true or false, got %s", describe(v)))
		}
		dst.SetBool(b)
		return nil
	case reflect.Int, reflect.Int64:
		num, ok := v.(number)
		if !ok {
			return pathError(path, fmt.Errorf("want an integer, got %s", describe(v)))
		}
		i, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			return pathError(path, fmt.Errorf("want an integer, got %s", num))
		}
		if dst.OverflowInt(i) {
			return pathError(path, fmt.Errorf("%d is out of range", i))
		}
		dst.SetInt(i)
		return nil
	}
	return pathError(path, fmt.Errorf("unsupported field type %s", dst.Type()))
}

func toDuration(v any) (time.Duration, error) {
	switch t := v.(type) {
	case string:
		d, err := time.ParseDuration(t)
		if err != nil {
			return 0, fmt.Errorf("want a duration such as \"1m\" or a number of seconds, got %q", t)
		}
		return d, nil
	case number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsNaN(f) || math.Abs(f) > float64(math.MaxInt64/int64(time.Second)) {
			return 0, fmt.Errorf("want a duration such as \"1m\" or a number of seconds, got %s", t)
		}
		return time.Duration(math.Round(f * float64(time.Second))), nil
	}
	return 0, fmt.Errorf("want a duration such as \"1m\" or a number of seconds, got %s", describe(v))
}

func describe(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case *object:
		return "an object"
	case []any:
		return "a list"
	case string:
		return strconv.Quote(t)
	case number:
		return string(t)
	case bool:
		return strconv.FormatBool(t)
	}
	return fmt.Sprintf("%T", v)
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
