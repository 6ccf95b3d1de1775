package sim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// embedded is a miniredis living in this process, with no listener and no
// goroutine of its own: each client connection hands every complete
// command straight to the server on the caller's goroutine, and buffers the
// reply for the client's next read. miniredis's own Dial would serve each
// connection over a net.Pipe with two goroutine hand-offs per command,
// which costs more than the command; here a virtual run touches no socket
// and no scheduler, which also keeps it deterministic.
//
// Scripts (EVAL, EVALSHA, SCRIPT) run in one Lua interpreter kept for the
// server's life (see scripting), their redis.call commands in miniredis.
//
// Its clock is set with SetTime before every interaction, so Lua's TIME is
// virtual time.
//
// TTLs do not move: keys never expire. miniredis can only move TTLs for
// every key at once, by FastForward or by its ClockTTL mode, and either
// way is wrong or slow here. Moving them in steps expires a key written
// just before a step early, and an early expiry hands out a full bucket:
// a coarse 100ms step showed the exact strategy 0.4% over the oracle. Moving
// them at every clock step sorts every key each time, which tripled a run's
// time. Every script of this module keeps its state valid without its TTL
// (a bucket refills to full from its stored time; ledgers carry absolute
// totals; allowances and presence records hold their lapse times), so a
// key that never expires decides exactly as one that expires on time, which
// the exact strategy's match with the oracle checks; TTLs are there to
// give memory back, which a run of a few minutes does not need.
type embedded struct {
	m   *miniredis.Miniredis
	srv *server.Server
	lua *scripting
	now time.Time // the clock as last set
}

func newEmbedded() (*embedded, error) { return newEmbeddedLua(true) }

// newEmbeddedLua returns an embedded Redis whose scripts run in scripting,
// or, without it, in miniredis's own EVAL (for the tests that compare them).
func newEmbeddedLua(scripts bool) (*embedded, error) {
	m := miniredis.NewMiniRedis()
	// Dial starts a server without a listener; the pipe it returns is not
	// used, only the server behind it.
	c, err := m.Dial()
	if err != nil {
		return nil, fmt.Errorf("sim: miniredis: %w", err)
	}
	_ = c.Close()
	e := &embedded{m: m, srv: m.Server()}
	if scripts {
		if e.lua, err = newScripting(m.Server()); err != nil {
			m.Close()
			return nil, err
		}
	}
	return e, nil
}

// SetTime sets the server's clock, which Lua TIME reads.
func (e *embedded) SetTime(t time.Time) {
	if !t.Equal(e.now) {
		e.now = t
		e.m.SetTime(t)
	}
}

// Client returns a go-redis client whose connections are served in process.
func (e *embedded) Client(hook redis.Hook) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:            "embedded",
		Protocol:        2,
		DisableIdentity: true,
		MaxRetries:      -1,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return e.conn(), nil
		},
		MaintNotificationsConfig: offline(),
	})
	if hook != nil {
		c.AddHook(hook)
	}
	c.AddHook(detachHook{})
	return c
}

// offline turns off go-redis's maintenance notifications, which nothing
// in process sends, for a client whose address is a name, not a host: on
// (go-redis's default), they make the client look its address up in DNS
// when it is made, to tell an internal endpoint from an external one, and
// a virtual run, which makes a client per instance, would wait on the
// resolver for each.
func offline() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// detachHook strips deadlines and cancellation from every command's
// context. In a virtual run, virtual time owns every deadline: the
// wall-clock timeouts a limiter puts on its own calls (sync's rounds
// and presence calls are bound by the round timeout) would otherwise fail a
// call whenever the machine is slow to schedule the run, and make the run
// depend on the machine's load. The embedded Redis answers at once anyway.
type detachHook struct{}

func (detachHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (detachHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return next(context.WithoutCancel(ctx), cmd)
	}
}

func (detachHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return next(context.WithoutCancel(ctx), cmds)
	}
}

func (e *embedded) Close() {
	e.m.Close()
	if e.lua != nil {
		e.lua.Close()
	}
}

func (e *embedded) conn() *inprocConn {
	c := &inprocConn{srv: e.srv, lua: e.lua}
	c.peer = server.NewPeer(bufio.NewWriter(&c.out))
	return c
}

// inprocConn is a net.Conn whose writes are executed as they arrive.
type inprocConn struct {
	srv     *server.Server
	lua     *scripting
	peer    *server.Peer
	in, out bytes.Buffer
	closed  bool
}

var errInprocEmpty = errors.New("sim: embedded redis: read with no reply pending")

func (c *inprocConn) Write(b []byte) (int, error) {
	if c.closed {
		return 0, net.ErrClosed
	}
	c.in.Write(b)
	for {
		args, n, err := parseCommand(c.in.Bytes())
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return len(b), nil
		}
		c.in.Next(n)
		if c.lua != nil && c.lua.handles(args) {
			c.lua.do(c.peer, args)
		} else {
			c.srv.Dispatch(c.peer, args)
		}
		c.peer.Flush()
	}
}

func (c *inprocConn) Read(b []byte) (int, error) {
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.out.Len() == 0 {
		return 0, errInprocEmpty
	}
	return c.out.Read(b)
}

func (c *inprocConn) Close() error                     { c.closed = true; return nil }
func (c *inprocConn) LocalAddr() net.Addr              { return inprocAddr{} }
func (c *inprocConn) RemoteAddr() net.Addr             { return inprocAddr{} }
func (c *inprocConn) SetDeadline(time.Time) error      { return nil }
func (c *inprocConn) SetReadDeadline(time.Time) error  { return nil }
func (c *inprocConn) SetWriteDeadline(time.Time) error { return nil }

type inprocAddr struct{}

func (inprocAddr) Network() string { return "inproc" }
func (inprocAddr) String() string  { return "embedded" }

// parseCommand reads one RESP array of bulk strings, a client's command,
// from the front of b. It returns n = 0 when b holds only part of one.
func parseCommand(b []byte) (args []string, n int, err error) {
	line := func(p int) (int64, int, bool, error) {
		i := bytes.Index(b[p:], []byte("\r\n"))
		if i < 0 {
			return 0, 0, false, nil
		}
		if i < 2 {
			return 0, 0, false, fmt.Errorf("sim: embedded redis: bad header %q", b[p:p+i])
		}
		v, err := strconv.ParseInt(string(b[p+1:p+i]), 10, 64)
		if err != nil || v < 0 {
			return 0, 0, false, fmt.Errorf("sim: embedded redis: bad header %q", b[p:p+i])
		}
		return v, p + i + 2, true, nil
	}
	if len(b) == 0 {
		return nil, 0, nil
	}
	if b[0] != '*' {
		return nil, 0, fmt.Errorf("sim: embedded redis: want an array, got %q", b[0])
	}
	count, p, ok, err := line(0)
	if !ok || err != nil {
		return nil, 0, err
	}
	args = make([]string, 0, count)
	for range count {
		if p >= len(b) {
			return nil, 0, nil
		}
		if b[p] != '$' {
			return nil, 0, fmt.Errorf("sim: embedded redis: want a bulk string, got %q", b[p])
		}
		size, q, ok, err := line(p)
		if !ok || err != nil {
			return nil, 0, err
		}
		if int64(len(b)-q) < size+2 {
			return nil, 0, nil
		}
		args = append(args, string(b[q:q+int(size)]))
		p = q + int(size) + 2
	}
	return args, p, nil
}
