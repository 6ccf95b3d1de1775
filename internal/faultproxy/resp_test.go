package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// validFrames are whole frames, each exactly as readFrame must return it.
var validFrames = []struct {
	name  string
	frame string
}{
	{"simple string", "+OK\r\n"},
	{"empty simple string", "+\r\n"},
	{"simple error", "-ERR unknown command 'FOO'\r\n"},
	{"integer", ":1000\r\n"},
	{"negative integer", ":-42\r\n"},
	{"bulk", "$5\r\nhello\r\n"},
	{"empty bulk", "$0\r\n\r\n"},
	{"bulk holding CRLF", "$4\r\na\r\nb\r\n"},
	{"bulk holding a frame", "$5\r\n+OK\r\n\r\n"},
	{"null bulk", "$-1\r\n"},
	{"null array", "*-1\r\n"},
	{"empty array", "*0\r\n"},
	{"command", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"},
	{"nested arrays", "*3\r\n*2\r\n:1\r\n*1\r\n$-1\r\n*0\r\n*-1\r\n"},
	{"deep nesting", strings.Repeat("*1\r\n", 1000) + ":1\r\n"},
	{"RESP3 null", "_\r\n"},
	{"boolean true", "#t\r\n"},
	{"boolean false", "#f\r\n"},
	{"double", ",3.14\r\n"},
	{"double exponent", ",1.5e-10\r\n"},
	{"double integer", ",10\r\n"},
	{"double inf", ",inf\r\n"},
	{"double -inf", ",-inf\r\n"},
	{"double nan", ",nan\r\n"},
	{"big number", "(3492890328409238509324850943850943825024385\r\n"},
	{"negative big number", "(-3492890328409238509324850943850943825024385\r\n"},
	{"blob error", "!21\r\nSYNTAX invalid syntax\r\n"},
	{"verbatim", "=15\r\ntxt:Some string\r\n"},
	{"empty verbatim", "=4\r\ntxt:\r\n"},
	{"map", "%2\r\n+first\r\n:1\r\n+second\r\n*2\r\n_\r\n#t\r\n"},
	{"empty map", "%0\r\n"},
	{"set", "~3\r\n+a\r\n:1\r\n$-1\r\n"},
	{"push", ">3\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n_\r\n"},
	{"HELLO 3 reply", "%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n"},
	// From the RESP3 specification: an attribute in front of an array.
	{"attribute", "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n"},
	{"attribute on an element", "*2\r\n:1\r\n|1\r\n+ttl\r\n:3600\r\n:2\r\n"},
	{"empty attribute", "|0\r\n+OK\r\n"},
	{"long simple string", "+" + strings.Repeat("x", 5000) + "\r\n"},
	{"long bulk", "$100000\r\n" + strings.Repeat("y", 100000) + "\r\n"},
}

// next is a frame placed after each frame under test: reading it back proves
// that readFrame took exactly one frame.
const next = "+NEXT\r\n"

// readers returns the ways a test reads input: with a default buffer, and
// one byte at a time through the smallest buffer, which exercises lines and
// payloads that straddle reads and overflow the buffer.
func readers(input string) map[string]*bufio.Reader {
	return map[string]*bufio.Reader{
		"buffered":  bufio.NewReader(strings.NewReader(input)),
		"byte-wise": bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(input)), 16),
	}
}

func TestReadFrameValid(t *testing.T) {
	for _, tt := range validFrames {
		for how, br := range readers(tt.frame + next) {
			got, err := readFrame(br)
			if err != nil || string(got) != tt.frame {
				t.Errorf("%s, %s: readFrame(%.40q) = %.40q, %v, want the frame, nil", tt.name, how, tt.frame, got, err)
				continue
			}
			if got, err := readFrame(br); err != nil || string(got) != next {
				t.Errorf("%s, %s: second readFrame = %q, %v, want %q, nil", tt.name, how, got, err, next)
			}
			if got, err := readFrame(br); err != io.EOF {
				t.Errorf("%s, %s: third readFrame = %q, %v, want io.EOF", tt.name, how, got, err)
			}
		}
	}
}

func TestReadFrameTruncated(t *testing.T) {
	for _, tt := range validFrames {
		if len(tt.frame) > 200 {
			continue // the short frames cover every cut point of every type
		}
		for i := 1; i < len(tt.frame); i++ {
			cut := tt.frame[:i]
			if got, err := readFrame(bufio.NewReader(strings.NewReader(cut))); err != io.ErrUnexpectedEOF {
				t.Errorf("%s: readFrame(%q) = %q, %v, want io.ErrUnexpectedEOF", tt.name, cut, got, err)
			}
		}
	}
	if got, err := readFrame(bufio.NewReader(strings.NewReader(""))); err != io.EOF {
		t.Errorf(`readFrame("") = %q, %v, want io.EOF`, got, err)
	}
}

func TestReadFrameMalformed(t *testing.T) {
	tests := []struct {
		name  string
		input string
	}{
		{"unknown type", "?x\r\n"},
		{"inline command", "PING\r\n"},
		{"empty line", "\r\n"},
		{"LF only", "+OK\n"},
		{"bad integer", ":12a\r\n"},
		{"empty integer", ":\r\n"},
		{"bad double", ",pi\r\n"},
		{"hex double", ",0x1p3\r\n"},
		{"Infinity double", ",Infinity\r\n"},
		{"bad boolean", "#x\r\n"},
		{"long boolean", "#tt\r\n"},
		{"null with body", "_x\r\n"},
		{"bad big number", "(12a\r\n"},
		{"sign-only big number", "(-\r\n"},
		{"bulk length with sign", "$+5\r\nhello\r\n"},
		{"bulk length with leading zero", "$05\r\nhello\r\n"},
		{"bulk length -2", "$-2\r\n"},
		{"empty bulk length", "$\r\n"},
		{"bulk too long for its length", "$3\r\nabcd\r\n"},
		{"bulk too big", "$999999999999\r\n"},
		{"null blob error", "!-1\r\n"},
		{"null verbatim", "=-1\r\n"},
		{"verbatim without format", "=3\r\ntxt\r\n"},
		{"verbatim without colon", "=5\r\ntxt_x\r\n"},
		{"array count -2", "*-2\r\n"},
		{"null map", "%-1\r\n"},
		{"null set", "~-1\r\n"},
		{"array too long", "*99999999999\r\n"},
		{"streamed string", "$?\r\n;4\r\nHell\r\n;0\r\n"},
		{"streamed array", "*?\r\n:1\r\n.\r\n"},
		{"bad element", "*2\r\n:1\r\n?\r\n"},
		{"line too long", "+" + strings.Repeat("x", maxLineLen) + "\r\n"},
	}
	for _, tt := range tests {
		for how, br := range readers(tt.input) {
			if got, err := readFrame(br); !errors.Is(err, errMalformed) {
				t.Errorf("%s, %s: readFrame(%.40q) = %.40q, %v, want errMalformed", tt.name, how, tt.input, got, err)
			}
		}
	}
}

func TestCommandName(t *testing.T) {
	tests := []struct {
		frame string
		want  string
	}{
		{"*2\r\n$3\r\nget\r\n$1\r\nk\r\n", "GET"},
		{"*1\r\n$4\r\nPING\r\n", "PING"},
		{"*3\r\n$7\r\nEvalSha\r\n$1\r\nx\r\n$1\r\n0\r\n", "EVALSHA"},
		{"*1\r\n$0\r\n\r\n", ""},
		{"*0\r\n", ""},
		{"*-1\r\n", ""},
		{"*1\r\n:1\r\n", ""},
		{"+OK\r\n", ""},
		{"", ""},
		{"*1\r\n$9\r\nGET\r\n", ""}, // not a whole frame: length past the end
	}
	for _, tt := range tests {
		if got := commandName([]byte(tt.frame)); got != tt.want {
			t.Errorf("commandName(%q) = %q, want %q", tt.frame, got, tt.want)
		}
	}
}

// FuzzReadFrame checks that readFrame never panics, that a frame it returns
// is a prefix of its input that reads back as itself, and that reading byte
// by byte through the smallest buffer agrees with reading it all at once.
func FuzzReadFrame(f *testing.F) {
	for _, tt := range validFrames {
		if len(tt.frame) < 1000 {
			f.Add([]byte(tt.frame))
			f.Add([]byte(tt.frame + next))
		}
	}
	f.Add([]byte("*2\r\n$3\r\nabcd\r\n"))
	f.Add([]byte("|1\r\n"))
	f.Add([]byte("%1\r\n*1\r\n"))
	f.Add([]byte("$2147483647\r\nx"))
	f.Fuzz(func(t *testing.T, input []byte) {
		frame, err := readFrame(bufio.NewReader(bytes.NewReader(input)))
		slow, slowErr := readFrame(bufio.NewReaderSize(iotest.OneByteReader(bytes.NewReader(input)), 16))
		if (err == nil) != (slowErr == nil) || !bytes.Equal(frame, slow) {
			t.Fatalf("readFrame(%q) = %q, %v; byte-wise = %q, %v", input, frame, err, slow, slowErr)
		}
		_ = commandName(input)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(input, frame) || len(frame) == 0 {
			t.Fatalf("readFrame(%q) = %q, not a prefix of the input", input, frame)
		}
		_ = commandName(frame)
		br := bufio.NewReader(bytes.NewReader(frame))
		again, err := readFrame(br)
		if err != nil || !bytes.Equal(again, frame) {
			t.Fatalf("readFrame(%q) = %q, %v, want it back", frame, again, err)
		}
		if _, err := readFrame(br); err != io.EOF {
			t.Fatalf("readFrame after %q = %v, want io.EOF", frame, err)
		}
	})
}
