package hybridlimit

import (
	"errors"
	"strings"
	"testing"
)

func TestKeyspaceKey(t *testing.T) {
	ks, err := NewKeyspace("rl:")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key, kind, want string
	}{
		{"user42", "tb", "rl:{user42}:tb"},
		{"a{b}c", "tb", "rl:{a%7Bb%7Dc}:tb"},
		{"}", "fw", "rl:{%7D}:fw"},
		{"100%", "tb", "rl:{100%25}:tb"},
		{"\x00\xff", "tb", "rl:{\x00\xff}:tb"},
	}
	for _, tt := range tests {
		got, err := ks.Key(tt.key, tt.kind)
		if err != nil || got != tt.want {
			t.Errorf("Key(%q, %q) = %q, %v, want %q", tt.key, tt.kind, got, err, tt.want)
		}
	}
}

func TestKeyspaceKeysShareSlot(t *testing.T) {
	ks, _ := NewKeyspace(DefaultPrefix)
	for _, key := range []string{"x", "{", "}", "{}", "}{", "a}b{c", "{user}", strings.Repeat("{", 100)} {
		a, _ := ks.Key(key, "cur")
		b, _ := ks.Key(key, "prev")
		if Slot(a) != Slot(b) {
			t.Errorf("key %q: %q and %q land in slots %d and %d", key, a, b, Slot(a), Slot(b))
		}
	}
}

func TestKeyspaceEscapingIsInjective(t *testing.T) {
	keys := []string{"%7B", "{", "%", "%25", "}", "%7D", "a", "%%", "{{"}
	seen := map[string]string{}
	for _, k := range keys {
		e := Escape(k)
		if prev, ok := seen[e]; ok {
			t.Errorf("Escape(%q) = Escape(%q) = %q", k, prev, e)
		}
		seen[e] = k
		if strings.ContainsAny(e, "{}") {
			t.Errorf("Escape(%q) = %q still holds a brace", k, e)
		}
	}
}

func TestKeyspaceRejects(t *testing.T) {
	if _, err := NewKeyspace("a{b"); err == nil {
		t.Error("NewKeyspace with a brace: no error")
	}
	if _, err := NewKeyspace(strings.Repeat("p", 65)); err == nil {
		t.Error("NewKeyspace with a 65-byte prefix: no error")
	}
	var ks Keyspace
	for _, key := range []string{"", strings.Repeat("k", MaxKeyLen+1)} {
		if _, err := ks.Key(key, "tb"); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Key(%d bytes) error = %v, want ErrInvalidKey", len(key), err)
		}
	}
	if _, err := ks.Key(strings.Repeat("k", MaxKeyLen), "tb"); err != nil {
		t.Errorf("Key(MaxKeyLen bytes) = %v", err)
	}
}
