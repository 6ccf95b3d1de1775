// Package sfv parses HTTP Structured Field Values (RFC 9651, which
// obsoletes RFC 8941): Lists, Items and Dictionaries. It exists so that the
// tests of package httplimit check the RateLimit and RateLimit-Policy fields
// with a real parser rather than with string comparisons; it is strict, as
// the RFC's parsing algorithms are, and fails the whole field on any error.
package sfv

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Token is a Structured Field Token, kept apart from a String.
type Token string

// DisplayString is a Structured Field Display String (RFC 9651 s3.3.8).
type DisplayString string

// Date is a Structured Field Date: seconds since the Unix epoch.
type Date int64

// Param is one parameter of an Item or an Inner List.
type Param struct {
	Key   string
	Value any
}

// Params are the parameters of an Item or Inner List, in order, each key
// once (a repeated key keeps its first position and its last value).
type Params []Param

// Get returns the value of key and whether it is there.
func (ps Params) Get(key string) (any, bool) {
	for _, p := range ps {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

// Item is a bare item with parameters. Value is one of int64, float64,
// string, Token, []byte, bool, Date or DisplayString.
type Item struct {
	Value  any
	Params Params
}

// InnerList is a parenthesised list of Items with parameters.
type InnerList struct {
	Items  []Item
	Params Params
}

// Member is an Item or an InnerList.
type Member any

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("sfv: syntax error")

// ParseList parses a List field value, the lines of a field joined by
// commas as RFC 9110 combines them.
func ParseList(field string) ([]Member, error) {
	p := &parser{s: field}
	p.skipSP()
	var out []Member
	for p.i < len(p.s) {
		m, err := p.member()
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		p.skipOWS()
		if p.i == len(p.s) {
			break
		}
		if p.s[p.i] != ',' {
			return nil, p.errorf("want ',' after a list member")
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return nil, p.errorf("trailing comma")
		}
	}
	return out, nil
}

// ParseItem parses an Item field value.
func ParseItem(field string) (Item, error) {
	p := &parser{s: field}
	p.skipSP()
	it, err := p.item()
	if err != nil {
		return Item{}, err
	}
	p.skipSP()
	if p.i != len(p.s) {
		return Item{}, p.errorf("trailing characters")
	}
	return it, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d of %q: %s", ErrSyntax, p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *parser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *parser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) member() (Member, error) {
	if p.i < len(p.s) && p.s[p.i] == '(' {
		return p.innerList()
	}
	return p.item()
}

func (p *parser) innerList() (InnerList, error) {
	p.i++ // '('
	var il InnerList
	for p.i < len(p.s) {
		p.skipSP()
		if p.i < len(p.s) && p.s[p.i] == ')' {
			p.i++
			ps, err := p.params()
			if err != nil {
				return InnerList{}, err
			}
			il.Params = ps
			return il, nil
		}
		it, err := p.item()
		if err != nil {
			return InnerList{}, err
		}
		il.Items = append(il.Items, it)
		if p.i >= len(p.s) || (p.s[p.i] != ' ' && p.s[p.i] != ')') {
			return InnerList{}, p.errorf("want ' ' or ')' in an inner list")
		}
	}
	return InnerList{}, p.errorf("unterminated inner list")
}

func (p *parser) item() (Item, error) {
	v, err := p.bareItem()
	if err != nil {
		return Item{}, err
	}
	ps, err := p.params()
	if err != nil {
		return Item{}, err
	}
	return Item{Value: v, Params: ps}, nil
}

func (p *parser) params() (Params, error) {
	var ps Params
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for j := range ps {
			if ps[j].Key == key {
				ps[j].Value, replaced = v, true
			}
		}
		if !replaced {
			ps = append(ps, Param{Key: key, Value: v})
		}
	}
	return ps, nil
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }

// isTChar reports whether c is a tchar of RFC 9110.
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *parser) key() (string, error) {
	start := p.i
	if p.i >= len(p.s) || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", p.errorf("want a key")
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *parser) bareItem() (any, error) {
	if p.i >= len(p.s) {
		return nil, p.errorf("want a bare item, got the end")
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token()
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.i++
		n, err := p.number()
		if err != nil {
			return nil, err
		}
		i, ok := n.(int64)
		if !ok {
			return nil, p.errorf("a date must be an integer")
		}
		return Date(i), nil
	case c == '%':
		return p.displayString()
	default:
		return nil, p.errorf("unexpected %q starting a bare item", c)
	}
}

func (p *parser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	if p.i >= len(p.s) || !isDigit(p.s[p.i]) {
		return nil, p.errorf("want a digit")
	}
	digits, dot := 0, -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if isDigit(c) {
			digits++
		} else if c == '.' && dot < 0 {
			if digits > 12 {
				return nil, p.errorf("more than 12 integer digits in a decimal")
			}
			dot = digits
		} else {
			break
		}
		p.i++
		if dot < 0 && digits > 15 {
			return nil, p.errorf("more than 15 digits in an integer")
		}
		if dot >= 0 && digits > 15 {
			return nil, p.errorf("more than 15 digits in a decimal")
		}
	}
	text := p.s[start:p.i]
	if dot < 0 {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, p.errorf("integer %q: %v", text, err)
		}
		return n, nil
	}
	if frac := digits - dot; frac == 0 || frac > 3 {
		return nil, p.errorf("a decimal needs 1 to 3 fractional digits")
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return nil, p.errorf("decimal %q: %v", text, err)
	}
	return f, nil
}

func (p *parser) str() (string, error) {
	p.i++ // '"'
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", p.errorf("bad escape in a string")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", p.errorf("byte %#x in a string", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *parser) token() (Token, error) {
	start := p.i
	p.i++
	for p.i < len(p.s) && (isTChar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return Token(p.s[start:p.i]), nil
}

func (p *parser) bytes() ([]byte, error) {
	p.i++ // ':'
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, p.errorf("unterminated byte sequence")
	}
	b, err := base64.StdEncoding.DecodeString(p.s[p.i : p.i+end])
	if err != nil {
		return nil, p.errorf("byte sequence: %v", err)
	}
	p.i += end + 1
	return b, nil
}

func (p *parser) boolean() (bool, error) {
	p.i++ // '?'
	if p.i < len(p.s) {
		switch p.s[p.i] {
		case '0':
			p.i++
			return false, nil
		case '1':
			p.i++
			return true, nil
		}
	}
	return false, p.errorf("a boolean is ?0 or ?1")
}

func (p *parser) displayString() (DisplayString, error) {
	if !strings.HasPrefix(p.s[p.i:], `%"`) {
		return "", p.errorf(`want %%" to open a display string`)
	}
	p.i += 2
	var b []byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '%':
			if p.i+2 > len(p.s) {
				return "", p.errorf("short percent escape")
			}
			h := p.s[p.i : p.i+2]
			if strings.ToLower(h) != h {
				return "", p.errorf("upper-case percent escape")
			}
			v, err := strconv.ParseUint(h, 16, 8)
			if err != nil {
				return "", p.errorf("bad percent escape %q", h)
			}
			b = append(b, byte(v))
			p.i += 2
		case c == '"':
			return DisplayString(b), nil
		case c < 0x20 || c > 0x7e:
			return "", p.errorf("byte %#x in a display string", c)
		default:
			b = append(b, c)
		}
	}
	return "", p.errorf("unterminated display string")
}
