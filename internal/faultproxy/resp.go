package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Bounds of the frame reader. They only keep a corrupt or hostile stream from
// making the reader allocate without end; Redis never comes near them.
const (
	// maxBulkLen is the largest bulk, verbatim or blob-error payload:
	// Redis's default proto-max-bulk-len, 512 MiB.
	maxBulkLen = 512 << 20
	// maxLineLen bounds one header or simple-type line, CRLF included.
	maxLineLen = 1 << 20
	// maxAggLen is the largest element count of one aggregate.
	maxAggLen = math.MaxInt32
	// maxPending bounds the elements still owed by the open aggregates of
	// one frame, so the count cannot overflow.
	maxPending = 1 << 40
	// payloadChunk is how much of a payload is read (and allocated) at a
	// time, so a header that lies about its length costs at most one chunk.
	payloadChunk = 64 << 10
)

// errMalformed is wrapped by every error about the bytes of a frame, as
// opposed to an I/O error or the end of the stream.
var errMalformed = errors.New("faultproxy: malformed RESP frame")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errMalformed}, args...)...)
}

// readFrame reads one whole RESP2 or RESP3 frame from br and returns its
// bytes exactly as they were on the wire, in a new slice.
//
// It knows every type Redis sends or accepts: simple string +, simple error -,
// integer :, bulk string $ (length -1 is the RESP2 null), array * (length -1
// is the RESP2 null array), and the RESP3 types null _, boolean #, double ,,
// big number (, blob error !, verbatim string =, map %, set ~, push > and
// attribute |. An attribute is metadata in front of a value, so the frame
// (or aggregate element) it starts goes on to include that value. Streamed
// strings and aggregates ($?, *?) are rejected: Redis never sends them.
//
// Aggregates are counted, not recursed into, so nesting depth costs nothing.
// Scalar types are checked as far as it costs nothing (a number parses, a
// boolean is t or f), so that a stream out of step shows up as an error
// rather than as silently misframed replies.
//
// At the end of the stream before the first byte of a frame it returns
// io.EOF; inside a frame, io.ErrUnexpectedEOF. Errors about the bytes
// themselves wrap errMalformed.
func readFrame(br *bufio.Reader) ([]byte, error) {
	var frame []byte
	for need := int64(1); need > 0; need-- {
		start := len(frame)
		var err error
		frame, err = readLine(br, frame)
		if err != nil {
			if err == io.EOF && len(frame) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line := frame[start : len(frame)-2] // without its CRLF
		if len(line) == 0 {
			return nil, malformed("empty line")
		}
		typ, body := line[0], line[1:]
		switch typ {
		case '+', '-':
			// Simple string and simple error: any text up to the CRLF.
		case ':':
			if _, err := strconv.ParseInt(string(body), 10, 64); err != nil {
				return nil, malformed("bad integer %q", clip(body))
			}
		case ',':
			if !isDouble(body) {
				return nil, malformed("bad double %q", clip(body))
			}
		case '#':
			if len(body) != 1 || (body[0] != 't' && body[0] != 'f') {
				return nil, malformed("bad boolean %q", clip(body))
			}
		case '_':
			if len(body) != 0 {
				return nil, malformed("bad null %q", clip(body))
			}
		case '(':
			if !isBigNumber(body) {
				return nil, malformed("bad big number %q", clip(body))
			}
		case '$', '!', '=':
			n, ok := parseLen(body)
			if !ok || n < -1 || (n == -1 && typ != '$') {
				return nil, malformed("bad length %q for type %q", clip(body), typ)
			}
			if n == -1 {
				continue // RESP2 null bulk string: no payload
			}
			if n > maxBulkLen {
				return nil, malformed("length %d over %d", n, maxBulkLen)
			}
			p := len(frame)
			if frame, err = readPayload(br, frame, n+2); err != nil {
				return nil, err
			}
			payload := frame[p:]
			if payload[n] != '\r' || payload[n+1] != '\n' {
				return nil, malformed("payload of %d bytes not followed by CRLF", n)
			}
			if typ == '=' && (n < 4 || payload[3] != ':') {
				return nil, malformed("verbatim string without a 3-byte format and colon")
			}
		case '*', '~', '>', '%', '|':
			n, ok := parseLen(body)
			if !ok || n < -1 || (n == -1 && typ != '*') {
				return nil, malformed("bad count %q for type %q", clip(body), typ)
			}
			if n == -1 {
				continue // RESP2 null array: no elements
			}
			if n > maxAggLen {
				return nil, malformed("count %d over %d", n, maxAggLen)
			}
			switch typ {
			case '%':
				n *= 2 // a key and a value per entry
			case '|':
				n = 2*n + 1 // the entries, then the value they describe
			}
			need += n
			if need > maxPending {
				return nil, malformed("more than %d elements pending", int64(maxPending))
			}
		default:
			return nil, malformed("unknown type byte %q", typ)
		}
	}
	return frame, nil
}

// readLine appends one line, CRLF included, to dst. It returns what it read
// even on error, so the caller can tell a clean end of stream from a cut one.
func readLine(br *bufio.Reader, dst []byte) ([]byte, error) {
	start := len(dst)
	for {
		chunk, err := br.ReadSlice('\n')
		dst = append(dst, chunk...)
		if len(dst)-start > maxLineLen {
			return dst, malformed("line longer than %d bytes", maxLineLen)
		}
		switch err {
		case nil:
			if len(dst)-start < 2 || dst[len(dst)-2] != '\r' {
				return dst, malformed("line not ended by CRLF")
			}
			return dst, nil
		case bufio.ErrBufferFull:
			// A line longer than the buffer: keep reading.
		default:
			return dst, err
		}
	}
}

// readPayload appends exactly n bytes from br to dst, growing dst a chunk at
// a time as bytes arrive rather than trusting n up front.
func readPayload(br *bufio.Reader, dst []byte, n int64) ([]byte, error) {
	for n > 0 {
		k := int(min(n, payloadChunk))
		dst = slices.Grow(dst, k)
		got, err := io.ReadFull(br, dst[len(dst):len(dst)+k])
		dst = dst[:len(dst)+got]
		n -= int64(got)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return dst, err
		}
	}
	return dst, nil
}

// parseLen parses the length of a bulk or aggregate the way Redis does:
// decimal digits, or exactly "-1", with no sign, space or leading zero.
func parseLen(b []byte) (int64, bool) {
	if string(b) == "-1" {
		return -1, true
	}
	if len(b) == 0 || len(b) > 18 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// isDouble reports whether b is a RESP3 double: a decimal or exponent
// number, inf, -inf or nan.
func isDouble(b []byte) bool {
	s := string(b)
	switch s {
	case "inf", "-inf", "nan":
		return true
	}
	if s == "" || strings.ContainsAny(s, "xXpP_iInN") { // no hex, no "Infinity"
		return false
	}
	_, err := strconv.ParseFloat(s, 64)
	return err == nil || errors.Is(err, strconv.ErrRange)
}

// isBigNumber reports whether b is an optional minus sign and then digits.
func isBigNumber(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// clip shortens b for an error message.
func clip(b []byte) []byte {
	const n = 32
	if len(b) > n {
		return b[:n]
	}
	return b
}

// commandName returns the upper-cased name of the command in frame, a whole
// frame from readFrame, or "" when frame is not an array whose first element
// is a bulk string (not a command a client would send).
func commandName(frame []byte) string {
	header, rest, ok := cutLine(frame)
	if !ok || len(header) < 2 || header[0] != '*' {
		return ""
	}
	if n, ok := parseLen(header[1:]); !ok || n < 1 {
		return ""
	}
	header, rest, ok = cutLine(rest)
	if !ok || len(header) < 2 || header[0] != '$' {
		return ""
	}
	n, ok := parseLen(header[1:])
	if !ok || n < 0 || n > int64(len(rest)) {
		return ""
	}
	return strings.ToUpper(string(rest[:n]))
}

// cutLine splits b after its first CRLF, returning the line without it.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := slices.Index(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	return b[:i-1], b[i+1:], true
}
