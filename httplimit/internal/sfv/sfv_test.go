package sfv

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseList(t *testing.T) {
	tests := []struct {
		in   string
		want []Member
	}{
		{`"default";q=100;w=60`, []Member{Item{Value: "default", Params: Params{{"q", int64(100)}, {"w", int64(60)}}}}},
		{`"a";r=0;t=1, "b\"\\";r=5`, []Member{
			Item{Value: "a", Params: Params{{"r", int64(0)}, {"t", int64(1)}}},
			Item{Value: `b"\`, Params: Params{{"r", int64(5)}}},
		}},
		{`  tok/x:y , ?1;a, -1.5;b=?0	,:aGk=:`, []Member{
			Item{Value: Token("tok/x:y")},
			Item{Value: true, Params: Params{{"a", true}}},
			Item{Value: -1.5, Params: Params{{"b", false}}},
			Item{Value: []byte("hi")},
		}},
		{`("a" b);x=1, @1659578233, %"f%c3%bc"`, []Member{
			InnerList{Items: []Item{{Value: "a"}, {Value: Token("b")}}, Params: Params{{"x", int64(1)}}},
			Item{Value: Date(1659578233)},
			Item{Value: DisplayString("fü")},
		}},
		{`"p";q=1;q=2`, []Member{Item{Value: "p", Params: Params{{"q", int64(2)}}}}},
		{``, nil},
	}
	for _, tt := range tests {
		got, err := ParseList(tt.in)
		if err != nil {
			t.Errorf("ParseList(%q) = %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseList(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}

func TestParseListErrors(t *testing.T) {
	for _, in := range []string{
		`"a",`,             // trailing comma
		`"a" "b"`,          // missing comma
		`"unterminated`,    // string
		`"bad\n"`,          // escape
		"\"ctl\x01\"",      // control byte in a string
		`"a";Q=1`,          // upper-case key
		`"a";q=`,           // missing value
		`1234567890123456`, // 16-digit integer
		`1.2345`,           // 4 fractional digits
		`1.`,               // no fractional digit
		`?2`,               // boolean
		`("a"`,             // inner list
		`:not base64:`,     // byte sequence
		`"a";q=1 ;w=2`,     // space before a parameter
		`%"A%C3"`,          // upper-case percent escape
		"\"a\"\x00",        // garbage after an item
	} {
		if got, err := ParseList(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseList(%q) = %#v, %v, want a syntax error", in, got, err)
		}
	}
	// RFC 9651 allows spaces after ';' before a key.
	if _, err := ParseList(`"name"; q=1, "x";r=1`); err != nil {
		t.Errorf("ParseList with a space after ';' = %v", err)
	}
}

func TestParseItem(t *testing.T) {
	it, err := ParseItem(` "x";a=1 `)
	if err != nil || it.Value != "x" {
		t.Fatalf("ParseItem = %#v, %v", it, err)
	}
	if _, err := ParseItem(`"x", "y"`); err == nil {
		t.Errorf("ParseItem of a list succeeded")
	}
}
