package faultproxy

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"
)

// queueLen is how many commands one connection may have in flight inside
// the proxy (forwarded, reply not yet written to the client). Past it the
// proxy stops reading commands until replies go out, which a stalled
// connection reaches quickly and a client sees as a server that stopped
// reading.
const queueLen = 1024

// errShutdown ends a connection goroutine that found its connection shut down.
var errShutdown = errors.New("faultproxy: connection shut down")

// reply is one frame from Redis on its way to the client.
type reply struct {
	frame []byte
	at    time.Time     // when it arrived from Redis; Delay counts from here
	late  time.Duration // LateReplies: hold it this much longer
	push  bool          // a RESP3 push frame, answering no command
	drop  bool          // discard it and cut the connection instead
}

// conn is one proxied client connection and its connection to Redis. Three
// goroutines move it along, connected by two queues that keep command order:
//
//	forwardCommands: client -> commands -> Redis; one fault per command -> pending
//	readReplies:     Redis -> replies, matched with pending -> out
//	writeReplies:    out -> Delay, Stall, drop -> client
//
// A fault is queued before its command is written to Redis, so the reply
// reader always finds it by the time the reply comes back. shutdown closes
// both sockets and done, which ends all three; forwardCommands and
// writeReplies call it when they end, while readReplies ends by closing out
// so that the replies queued before the end still reach the client.
type conn struct {
	p       *Proxy
	client  net.Conn
	done    chan struct{} // closed by shutdown
	pending chan fault    // one per forwarded command, in order
	out     chan reply    // replies in order; closed when the Redis side ends

	once   sync.Once
	mu     sync.Mutex
	server net.Conn // nil until dialed
	closed bool
}

// run dials the target and runs the connection. It is the first of the
// connection's goroutines and starts the other two.
func (c *conn) run() {
	defer c.p.wg.Done()
	defer c.shutdown()
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(c.p.ctx, "tcp", c.p.target)
	if err != nil {
		c.p.stats.dialErrors.Add(1)
		return
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.server = server
	}
	c.mu.Unlock()
	if closed { // shut down while dialing
		_ = server.Close()
		return
	}
	c.p.stats.conns.Add(1)
	c.p.wg.Add(2)
	go c.readReplies(server)
	go c.writeReplies()
	c.forwardCommands(server)
}

// shutdown closes both sides and ends the connection's goroutines. It is
// safe to call more than once and from any goroutine.
func (c *conn) shutdown() {
	c.once.Do(func() {
		close(c.done)
		c.mu.Lock()
		c.closed = true
		server := c.server
		c.mu.Unlock()
		_ = c.client.Close()
		if server != nil {
			_ = server.Close()
		}
		c.p.unregister(c)
	})
}

// forwardCommands reads whole commands from the client and writes each to
// Redis, once or twice, after queueing its fault. It returns when either
// side fails; run then shuts the connection down.
func (c *conn) forwardCommands(server net.Conn) {
	br := bufio.NewReader(c.client)
	bw := bufio.NewWriter(server)
	for {
		frame, err := readFrame(br)
		if err != nil {
			return
		}
		f := c.p.take(commandName(frame))
		select {
		case c.pending <- f:
		case <-c.done:
			return
		}
		// Count before writing, so the counts are never behind what Redis saw.
		c.p.stats.commands.Add(1)
		if f.dup {
			c.p.stats.duplicated.Add(1)
		}
		_, _ = bw.Write(frame) // a write error sticks and Flush reports it
		if f.dup {
			_, _ = bw.Write(frame)
		}
		// Send a pipeline on as one batch: flush once nothing more has
		// arrived. Clients write whole commands, so a partial one in the
		// buffer is completed without waiting on a reply.
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

// readReplies reads replies from Redis, matches each with the fault of its
// command and queues it for writeReplies; a duplicated command's second
// reply is read and discarded. It closes out when Redis closes the
// connection, after the last reply, so writeReplies delivers what came
// before; and it stops after a dropped reply, since nothing after it will
// be delivered.
func (c *conn) readReplies(server net.Conn) {
	defer c.p.wg.Done()
	defer close(c.out)
	br := bufio.NewReader(server)
	for {
		r, err := c.nextReply(br)
		if err != nil {
			return
		}
		var f fault
		select {
		case f = <-c.pending:
		case <-c.done:
			return
		}
		r.drop, r.late = f.drop, f.late
		if !c.send(r) || f.drop {
			return
		}
		if f.dup {
			if _, err := c.nextReply(br); err != nil {
				return
			}
		}
	}
}

// nextReply reads the next reply from Redis, queueing any push frames
// before it for the client as they are.
func (c *conn) nextReply(br *bufio.Reader) (reply, error) {
	for {
		frame, err := readFrame(br)
		if err != nil {
			return reply{}, err
		}
		r := reply{frame: frame, at: time.Now()}
		if frame[0] != '>' {
			return r, nil
		}
		r.push = true
		if !c.send(r) {
			return reply{}, errShutdown
		}
	}
}

// send queues r for writeReplies unless the connection is shut down.
func (c *conn) send(r reply) bool {
	select {
	case c.out <- r:
		return true
	case <-c.done:
		return false
	}
}

// writeReplies writes queued replies to the client in order, each after its
// Delay and while not stalled, and cuts the connection at a dropped reply.
// Replies are buffered while more are queued and flushed before any wait.
func (c *conn) writeReplies() {
	defer c.p.wg.Done()
	bw := bufio.NewWriter(c.client)
	flush := func() bool {
		if err := bw.Flush(); err != nil {
			c.shutdown()
			return false
		}
		return true
	}
	for {
		var r reply
		var ok bool
		select {
		case r, ok = <-c.out:
		default:
			if !flush() {
				return
			}
			select {
			case r, ok = <-c.out:
			case <-c.done:
				return
			}
		}
		if !ok { // Redis closed the connection: pass that on
			flush()
			c.shutdown()
			return
		}
		if !c.hold(r.at.Add(r.late), flush) {
			return
		}
		if r.drop {
			if flush() {
				c.p.stats.dropped.Add(1)
				c.shutdown()
			}
			return
		}
		// Count first: a big frame bypasses the buffer, and a test that
		// has its reply must find it counted.
		if !r.push {
			c.p.stats.replies.Add(1)
		}
		if _, err := bw.Write(r.frame); err != nil {
			c.shutdown()
			return
		}
	}
}

// hold waits until a reply due at at (its arrival, plus LateReplies) may go
// out: until the Delay after at has passed and the proxy is not stalled. It
// flushes what is buffered before waiting, and returns false if the
// connection was shut down meanwhile.
func (c *conn) hold(at time.Time, flush func() bool) bool {
	if wait := time.Until(at.Add(c.p.replyDelay())); wait > 0 {
		if !flush() {
			return false
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return false
		}
	}
	for {
		stall := c.p.stalled()
		if stall == nil {
			return true
		}
		if !flush() {
			return false
		}
		select {
		case <-stall:
		case <-c.done:
			return false
		}
	}
}
