package hybridlimit

import (
	"fmt"
	"strings"
)

// MaxKeyLen bounds the length of a caller's key, in bytes, before escaping.
const MaxKeyLen = 1024

// DefaultPrefix is the key prefix used when a limiter is given none.
const DefaultPrefix = "hl:"

// Keyspace names every Redis key the limiters write, so slot placement can be
// audited in one place. A key name is
//
//	prefix + "{" + escaped caller key + "}" + ":" + kind
//
// The braces make the escaped caller key the Redis Cluster hash tag, so the
// several keys one script touches for one caller key (a window and its
// predecessor, a lease set and its counter) share a slot. Escaping
// percent-encodes '%', '{' and '}' so that a caller key containing braces
// cannot move or empty the hash tag, and distinct caller keys stay distinct.
// Any other byte, binary included, is kept as it is.
//
// The zero Keyspace uses no prefix. A Keyspace is a value, safe for
// concurrent use.
type Keyspace struct {
	prefix string
}

// NewKeyspace returns a Keyspace with the given prefix. The prefix may not
// contain braces (it would steal the hash tag) and is at most 64 bytes.
func NewKeyspace(prefix string) (Keyspace, error) {
	if strings.ContainsAny(prefix, "{}") {
		return Keyspace{}, fmt.Errorf("hybridlimit: key prefix %q contains a brace", prefix)
	}
	if len(prefix) > 64 {
		return Keyspace{}, fmt.Errorf("hybridlimit: key prefix is %d bytes, more than 64", len(prefix))
	}
	return Keyspace{prefix: prefix}, nil
}

// Prefix returns the prefix every key name starts with.
func (ks Keyspace) Prefix() string { return ks.prefix }

// CheckKey reports whether key can name a limit: not empty, at most MaxKeyLen bytes.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// Key returns the Redis key name for one kind of state of a caller key.
// It returns an error wrapping ErrInvalidKey for keys CheckKey rejects.
func (ks Keyspace) Key(key, kind string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	return ks.Tagged(Escape(key), kind), nil
}

// Tagged returns prefix + "{" + tag + "}" + ":" + kind for a tag that is
// already escaped (or made by the library, such as a slot-group name).
func (ks Keyspace) Tagged(tag, kind string) string {
	var b strings.Builder
	b.Grow(len(ks.prefix) + len(tag) + len(kind) + 3)
	b.WriteString(ks.prefix)
	b.WriteByte('{')
	b.WriteString(tag)
	b.WriteString("}:")
	b.WriteString(kind)
	return b.String()
}

// AppendTagged appends prefix + "{" + tag + "}:" to dst, the start of the
// name Tagged makes, so that names can be built into a shared buffer.
func (ks Keyspace) AppendTagged(dst []byte, tag string) []byte {
	dst = append(dst, ks.prefix...)
	dst = append(dst, '{')
	dst = append(dst, tag...)
	return append(dst, "}:"...)
}

// Escape percent-encodes '%', '{' and '}' in key, so the result can sit
// inside a hash tag. It returns key itself when nothing needs escaping.
func Escape(key string) string {
	if !strings.ContainsAny(key, "%{}") {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
