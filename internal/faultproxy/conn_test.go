package faultproxy

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// rawConn is a connection that speaks RESP by hand, to see the exact frames
// a client gets.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes one command as an array of bulk strings.
func (r *rawConn) send(args ...string) {
	r.t.Helper()
	var b bytes.Buffer
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if _, err := r.c.Write(b.Bytes()); err != nil {
		r.t.Fatalf("write %q: %v", args, err)
	}
}

// recv reads one frame and checks that it starts with prefix.
func (r *rawConn) recv(prefix string) {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := readFrame(r.br)
	if err != nil || !strings.HasPrefix(string(f), prefix) {
		r.t.Fatalf("read %q, %v, want a frame starting %q", f, err, prefix)
	}
}

// TestPushFramesPassThrough checks that a RESP3 push frame (a client-tracking
// invalidation) reaches the client and answers no command: the replies
// after it stay matched with their commands.
func TestPushFramesPassThrough(t *testing.T) {
	t.Parallel()
	srv := redistest.StandaloneServer(t)
	direct := srv.Client(t)
	key := redistest.Prefix(t) + "k"
	ctx := context.Background()
	t.Cleanup(func() { direct.Del(ctx, key) })
	p := Start(t, srv.Addr)
	r := dialRaw(t, p.Addr())

	r.send("HELLO", "3")
	r.recv("%")
	r.send("CLIENT", "TRACKING", "ON")
	r.recv("+OK")
	p.TargetCommands("PING")
	p.DuplicateRequests(1) // PING's second reply is discarded, ECHO's stays in step
	r.send("GET", key)
	r.recv("_")
	if err := direct.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	r.recv(">2\r\n$10\r\ninvalidate\r\n")
	r.send("PING")
	r.recv("+PONG")
	r.send("ECHO", "after")
	r.recv("$5\r\nafter\r\n")
	if s := p.Stats(); s.Replies != 5 || s.Duplicated != 1 {
		t.Errorf("Stats() = %+v, want 5 replies (the push not counted), 1 duplicated", s)
	}
}
