package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// setupCommands are the commands go-redis sends to set up each new
// connection (HELLO, then AUTH, SELECT, READONLY and CLIENT SETNAME, SETINFO,
// TRACKING, MAINT_NOTIFICATIONS as configured). Faults skip them unless
// TargetCommands names them: otherwise DropReplies(1) set before the pool has
// a connection would hit the HELLO of the handshake instead of the command
// under test.
var setupCommands = map[string]bool{
	"":         true, // not a command array at all
	"HELLO":    true,
	"AUTH":     true,
	"SELECT":   true,
	"READONLY": true,
	"CLIENT":   true,
}

// dialTimeout bounds the dial to the target for one client connection.
const dialTimeout = 5 * time.Second

// Proxy is a loopback TCP proxy to one Redis server that injects faults per
// command. Every client connection it accepts gets a connection of its own to
// the target; the proxy reads whole commands from the client and forwards
// them, and reads whole replies from Redis and forwards them in order, each
// according to the faults set when its command went through.
//
// Faults can be set and cleared at any time. Counted faults (DropReplies,
// DuplicateRequests, LateReplies) apply to the next n commands the proxy
// reads from any client, in the order it reads them, and are fixed for a
// command when it is read; they skip connection setup commands unless
// TargetCommands says otherwise. Delay, Stall and RefuseConnections apply
// to everything, setup included, while they are set.
//
// Goroutines: Listen starts one goroutine that accepts connections; each
// accepted connection runs three (commands client to Redis, replies from
// Redis, replies to the client). A connection's goroutines end when either
// side closes it, when a dropped reply cuts it, or on Disconnect; Close ends
// all of them and waits for them.
//
// The zero value is not usable; call Listen or Start. A Proxy is safe for
// concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // done when Close begins; bounds dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection goroutine

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	closed  bool
	conns   map[*conn]struct{}
	drop    int // replies still to drop; < 0: all
	dup     int // commands still to duplicate; < 0: all
	late    int // replies still to make late; < 0: all
	lateBy  time.Duration
	targets map[string]bool // nil: every command but setupCommands
	delay   time.Duration
	stall   chan struct{} // non-nil while stalled; Resume closes it
	refuse  bool

	stats struct {
		conns, refused, dialErrors, commands, duplicated, replies, dropped, late atomic.Int64
	}
}

// Stats counts what a Proxy has done since Listen. All counts are totals
// except Open.
type Stats struct {
	// Conns is the number of client connections proxied to the target.
	Conns int64
	// Open is the number of client connections open now.
	Open int64
	// Refused is the number of client connections closed at once by
	// RefuseConnections.
	Refused int64
	// DialErrors is the number of client connections closed because the
	// target could not be dialed.
	DialErrors int64
	// Commands is the number of commands read from clients and forwarded to
	// the target. A duplicated command counts once.
	Commands int64
	// Duplicated is the number of commands sent to the target twice by
	// DuplicateRequests.
	Duplicated int64
	// Replies is the number of replies forwarded to clients. Push frames,
	// discarded second replies and dropped replies are not counted.
	Replies int64
	// Dropped is the number of replies discarded by DropReplies. Replies to
	// later commands lost when the connection was cut are not counted.
	Dropped int64
	// Late is the number of commands whose reply LateReplies held back.
	Late int64
}

// Listen starts a proxy to the Redis server at target on a free loopback
// port (see Addr). The proxy dials target once per client connection, not
// now, so target need not be up yet. Close stops it.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[*conn]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Start is Listen for a test: it fails the test on error and closes the
// proxy when the test ends.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := Listen(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the address clients should dial, such as "127.0.0.1:40123".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every proxied connection on both sides
// (replies held by Delay or Stall are lost), and waits for every goroutine
// of the proxy to end. It is safe to call twice; later calls return the result
// of the first.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		conns := make([]*conn, 0, len(p.conns))
		for c := range p.conns {
			conns = append(conns, c)
		}
		p.mu.Unlock()

		p.cancel()
		if err := p.ln.Close(); err != nil {
			p.closeErr = fmt.Errorf("faultproxy: close: %w", err)
		}
		for _, c := range conns {
			c.shutdown()
		}
		p.wg.Wait()
	})
	return p.closeErr
}

// DropReplies makes the proxy forward the next n commands to Redis, then
// discard the reply to each and close that client connection, as a network
// failure after the command ran would. The client sees a network error
// (go-redis retries it by default, running the command again), never the
// reply. Commands the client pipelined after a dropped one were forwarded
// too and may or may not have run; their replies are lost with the
// connection. n < 0 drops every reply until the next call; n = 0 stops.
// Each call replaces the previous count.
//
// For example, DropReplies(1) before client.Incr(ctx, "k") leaves k at 1 on
// the server while the client gets an error, or, with go-redis retries, at 2
// while the client gets 2.
func (p *Proxy) DropReplies(n int) {
	p.mu.Lock()
	p.drop = n
	p.mu.Unlock()
}

// DuplicateRequests makes the proxy send each of the next n commands to
// Redis twice, back to back, as a retransmitting network or client would.
// The client gets the first reply; the second is read and discarded. n < 0
// duplicates every command until the next call; n = 0 stops. Each call
// replaces the previous count.
//
// For example, DuplicateRequests(1) before client.Incr(ctx, "k") returns 1
// to the client and leaves k at 2 on the server.
func (p *Proxy) DuplicateRequests(n int) {
	p.mu.Lock()
	p.dup = n
	p.mu.Unlock()
}

// LateReplies makes the reply to each of the next n commands go out d late
// (on top of Delay), as if Redis took d longer to run them. Other replies on
// the same connection queue behind a late one, as they would behind a slow
// command. n < 0 makes every reply late until the next call; n = 0 or
// d <= 0 stops. Each call replaces the previous count.
//
// Unlike Delay and Stall it is counted and obeys TargetCommands, so a
// client that times out and retries on a new connection gets through the
// handshake at once and sends the command again: LateReplies(-1, time.Second)
// with a 50 ms ReadTimeout runs an INCR once per go-redis attempt.
func (p *Proxy) LateReplies(n int, d time.Duration) {
	p.mu.Lock()
	p.late, p.lateBy = n, d
	if d <= 0 {
		p.late = 0
	}
	p.mu.Unlock()
}

// TargetCommands restricts DropReplies, DuplicateRequests and LateReplies
// to commands with the given names (case-insensitive; "EVALSHA", "CLIENT").
// Commands not named pass through untouched and do not use up a count. With
// no names it restores the default: every command except those go-redis
// sends to set up a connection (HELLO, AUTH, SELECT, READONLY, CLIENT).
//
// For example, TargetCommands("EVALSHA", "EVAL") then DropReplies(1) drops
// the reply to the next script call however many TIME or GET calls go
// through first.
func (p *Proxy) TargetCommands(names ...string) {
	var t map[string]bool
	if len(names) > 0 {
		t = make(map[string]bool, len(names))
		for _, n := range names {
			t[strings.ToUpper(n)] = true
		}
	}
	p.mu.Lock()
	p.targets = t
	p.mu.Unlock()
}

// Delay holds every reply until d after it arrived from Redis, so a command
// completes no sooner than d after Redis ran it; d <= 0 turns delay off.
// It models latency on the reply path, not a slow link: replies that
// arrive together (a pipeline) leave together, so a pipeline of n commands
// takes d longer, not n·d. Commands are not delayed. A reply already waiting
// uses the delay in force when it is due to go out.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = max(d, 0)
	p.mu.Unlock()
}

// Stall holds every reply not yet written to a client until Resume, on open
// and new connections alike, without closing anything. Commands still reach
// Redis and run, so to the client this is a server that stopped answering
// after doing the work. (For a server that stops running commands too, stop
// the process, e.g. redistest's Server.Signal with SIGSTOP.) A client that
// times out and closes its connection meanwhile loses the held replies with
// it; one that redials is stalled in the handshake and sends nothing again
// (LateReplies lets the retry through). Calling Stall while stalled does
// nothing.
func (p *Proxy) Stall() {
	p.mu.Lock()
	if p.stall == nil {
		p.stall = make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume releases the replies held by Stall, in order. Calling it while not
// stalled does nothing.
func (p *Proxy) Resume() {
	p.mu.Lock()
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
	p.mu.Unlock()
}

// RefuseConnections makes the proxy, while on is true, accept each new client
// connection and close it at once, as a server that is down behind a load
// balancer would. Connections already open are left alone; see Disconnect.
func (p *Proxy) RefuseConnections(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Disconnect closes every open client connection, both sides, as a network
// blip would. Replies not yet forwarded are lost; commands already forwarded
// may or may not have run. New connections are accepted as usual (unless
// refused). It returns how many connections it closed.
func (p *Proxy) Disconnect() int {
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.shutdown()
	}
	return len(conns)
}

// Stats returns the proxy's counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := int64(len(p.conns))
	p.mu.Unlock()
	return Stats{
		Conns:      p.stats.conns.Load(),
		Open:       open,
		Refused:    p.stats.refused.Load(),
		DialErrors: p.stats.dialErrors.Load(),
		Commands:   p.stats.commands.Load(),
		Duplicated: p.stats.duplicated.Load(),
		Replies:    p.stats.replies.Load(),
		Dropped:    p.stats.dropped.Load(),
		Late:       p.stats.late.Load(),
	}
}

// fault is what happens to one command and its reply.
type fault struct {
	drop bool          // discard the reply and cut the connection
	dup  bool          // send the command twice, discard the second reply
	late time.Duration // hold the reply this much longer
}

// take decides the fault for the next command, named name, and uses up the
// counts it spends.
func (p *Proxy) take(name string) fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	targeted := !setupCommands[name]
	if p.targets != nil {
		targeted = p.targets[name]
	}
	if !targeted {
		return fault{}
	}
	var f fault
	if p.drop != 0 {
		f.drop = true
		if p.drop > 0 {
			p.drop--
		}
	}
	if p.dup != 0 {
		f.dup = true
		if p.dup > 0 {
			p.dup--
		}
	}
	if p.late != 0 {
		f.late = p.lateBy
		p.stats.late.Add(1)
		if p.late > 0 {
			p.late--
		}
	}
	return f
}

// replyDelay returns the delay in force.
func (p *Proxy) replyDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// stalled returns a channel closed on Resume, or nil when not stalled.
func (p *Proxy) stalled() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stall
}

// accept is the accept loop, run by Listen.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient error such as too many open files: back off a
			// little, as net/http does, rather than spin.
			select {
			case <-time.After(10 * time.Millisecond):
				continue
			case <-p.ctx.Done():
				return
			}
		}
		c := &conn{
			p:       p,
			client:  client,
			done:    make(chan struct{}),
			pending: make(chan fault, queueLen),
			out:     make(chan reply, queueLen),
		}
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		if !refuse && !closed {
			p.conns[c] = struct{}{}
			p.wg.Add(1) // under mu, so Close cannot miss it
		}
		p.mu.Unlock()
		switch {
		case closed:
			_ = client.Close()
			return
		case refuse:
			p.stats.refused.Add(1)
			_ = client.Close()
		default:
			go c.run()
		}
	}
}

// unregister forgets c, once it is shut down.
func (p *Proxy) unregister(c *conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
