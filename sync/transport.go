package sync

import (
	"context"
	"errors"
	"fmt"
	stdsync "sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// transport carries a round's messages to Redis and their replies back:
// one script call per Redis node of up to maxKeys messages (on a cluster
// the node serving each message's slot group, as nodes last learned it;
// one node otherwise), pipelined, NOSCRIPT answered with EVAL, WAIT under
// durable sync, and every reply checked (scripts.ParseSyncReplies). A message
// that reaches a node no longer serving its slot is answered "elsewhere";
// the round then reads the slot map anew and sends it once more. It knows
// messages and replies, not leases; it tells each node's breaker how its
// calls went.
type transport struct {
	rdb     hybridlimit.Redis
	script  *scripts.Script // scripts.SyncCluster on a cluster, else scripts.Sync
	header  [scripts.SyncHeaderArgs]any
	keyArgs int // ARGV a message: its key names, then the message
	maxKeys int // messages per call
	durable durability
	// name appends the two key names of m's part to dst (see appendPartKeys).
	name  func(dst []byte, m *message) ([]byte, [2]int)
	nodes *nodes
	// refresh points nodes at the masters the cluster's slot map names
	// (nil off a cluster).
	refresh func(ctx context.Context)
	stats   *counters
	clock   Clock
}

// durability is WithDurableSync's setting: no replicas for none.
type durability struct {
	replicas int
	timeout  time.Duration
}

// pipelineCalls bounds the script calls in one pipeline, and
// pipelineParallel the pipelines in flight at once.
const (
	pipelineCalls    = 64
	pipelineParallel = 4
)

// send sends msgs and stores the replies in them. A call that fails
// leaves its messages without a reply; the next round says the same in
// absolute terms, so nothing is lost and nothing counts twice.
func (t *transport) send(ctx context.Context, msgs []message) error {
	if len(msgs) == 0 {
		return nil
	}
	defer t.stats.observeRound(time.Now(), len(msgs))
	if t.refresh != nil && !t.nodes.known.Load() {
		t.refresh(ctx)
	}
	all := make([]*message, len(msgs))
	for i := range msgs {
		all[i] = &msgs[i]
	}
	moved, err := t.sendTo(ctx, all)
	if len(moved) > 0 {
		// The slot map moved under the round: read it again, and send
		// what went to the wrong node once more.
		if r, ok := t.rdb.(interface{ ReloadState(context.Context) }); ok {
			r.ReloadState(ctx)
		}
		if t.refresh != nil {
			t.refresh(ctx)
		}
		_, again := t.sendTo(ctx, moved)
		err = errors.Join(err, again)
	}
	return err
}

// sendTo sends msgs in calls by node and stores the replies in them; it
// returns the messages answered elsewhere, which have none. One pipeline,
// the usual case (a cluster client splits it per node itself), runs on the
// caller's goroutine, which waits for it anyway; more run up to
// pipelineParallel at once.
func (t *transport) sendTo(ctx context.Context, msgs []*message) (moved []*message, err error) {
	calls := t.batches(msgs)
	type pipe struct {
		node  hybridlimit.Redis
		calls []*call
	}
	var pipes []pipe
	for node, calls := range t.byNode(ctx, calls) {
		for i := 0; i*pipelineCalls < len(calls); i++ {
			pipes = append(pipes, pipe{node, calls[i*pipelineCalls : min((i+1)*pipelineCalls, len(calls))]})
		}
	}
	var mu stdsync.Mutex
	var errs []error
	run := func(p pipe) {
		if err := t.pipeline(ctx, p.node, p.calls); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	if len(pipes) == 1 {
		run(pipes[0])
	} else {
		var g errgroup.Group
		g.SetLimit(pipelineParallel)
		for _, p := range pipes {
			g.Go(func() error { run(p); return nil })
		}
		_ = g.Wait()
	}
	t.stats.scriptCalls.Add(uint64(len(calls)))
	t.judgeNodes(calls)
	for _, c := range calls {
		moved = append(moved, c.moved...)
	}
	t.stats.elsewhere.Add(uint64(len(moved)))
	return moved, errors.Join(errs...)
}

// judgeNodes tells each node's breaker how its calls in a round went: well
// if any of them was answered, else with the first call's error. A call
// cut short by its caller (the loop's ctx ended) says nothing of Redis.
func (t *transport) judgeNodes(calls []*call) {
	now := t.clock.Now()
	answered := make(map[*node]bool)
	failed := make(map[*node]error)
	for _, c := range calls {
		n := c.node
		switch {
		case c.err == nil:
			answered[n] = true
		case errors.Is(c.err, context.Canceled):
		case failed[n] == nil:
			failed[n] = c.err
		}
	}
	for n := range answered {
		n.breaker.outcome(now, nil)
	}
	for n, err := range failed {
		if !answered[n] {
			n.breaker.outcome(now, err)
		}
	}
}

// masterForKey is the part of *redis.ClusterClient that finds a key's node.
type masterForKey interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// byNode returns the calls to send through each client: all through the
// limiter's client, unless durable sync is on with a cluster client. WAIT
// counts the replicas that have the writes of its own connection, so then
// each node's calls go through that node's client, in pipelines that end
// with WAIT on the same connection.
func (t *transport) byNode(ctx context.Context, calls []*call) map[hybridlimit.Redis][]*call {
	cc, cluster := t.rdb.(masterForKey)
	if t.durable.replicas == 0 || !cluster {
		return map[hybridlimit.Redis][]*call{t.rdb: calls}
	}
	out := make(map[hybridlimit.Redis][]*call)
	for _, c := range calls {
		var node hybridlimit.Redis = t.rdb // no node known: the calls fail (waitReplicas) and go again next round
		if n, err := cc.MasterForKey(ctx, c.keys[0]); err == nil {
			node = n
		}
		out[node] = append(out[node], c)
	}
	return out
}

// call is one script call: messages for one node, in order.
type call struct {
	node *node // the node its messages' slot groups map to
	msgs []*message
	keys []string // KEYS: the first message's bucket, which routes the call
	// names holds each message's key names (its bucket, and in optimistic
	// mode its allowances), argv the message as sync.lua reads it
	// (scripts.SyncMsg); args the header, then a pointer to each of a
	// message's ARGV.
	names, argv []string
	args        []any
	err         error      // why the call got no usable reply, once sent
	moved       []*message // the messages answered elsewhere
}

// batches splits the messages into script calls by node. Each message is
// written packed into one buffer per call, and its key names into
// another; each buffer becomes one string that the call's ARGV
// slice, and the command refers to them by pointer, which an interface
// holds without copying. So a call costs a few allocations whatever its
// number of messages, and an entry keeps no key names.
func (t *transport) batches(msgs []*message) []*call {
	perNode := make(map[*node]int)
	for _, m := range msgs {
		perNode[t.nodes.of(m.group)]++
	}
	open := make(map[*node]*building, len(perNode))
	var all []*building
	for _, m := range msgs {
		n := t.nodes.of(m.group)
		c := open[n]
		if c == nil || len(c.msgs) == t.maxKeys {
			size := min(perNode[n], t.maxKeys)
			perNode[n] -= size
			c = t.newBuilding(n, size)
			open[n] = c
			all = append(all, c)
		}
		c.add(t, m)
	}
	calls := make([]*call, len(all))
	for i, c := range all {
		calls[i] = c.finish()
	}
	return calls
}

// building is a call being written: its messages' ARGV and KEYS end to
// end, and where each ends.
type building struct {
	*call
	text, nameText []byte
	ends, nameEnds []int
}

// newBuilding starts a call to node n for size messages.
func (t *transport) newBuilding(n *node, size int) *building {
	return &building{
		call: &call{
			node: n,
			msgs: make([]*message, 0, size),
			args: append(make([]any, 0, len(t.header)+t.keyArgs*size), t.header[:]...),
		},
		text:     make([]byte, 0, scripts.SyncMsgLen*size),
		ends:     make([]int, 0, size),
		nameText: make([]byte, 0, (t.keyArgs-1)*48*size),
		nameEnds: make([]int, 0, (t.keyArgs-1)*size),
	}
}

// add writes m into the call.
func (c *building) add(t *transport, m *message) {
	c.msgs = append(c.msgs, m)
	var ends [2]int
	c.nameText, ends = t.name(c.nameText, m)
	// Reserve mode sends the bucket's name alone.
	names := ends[:t.keyArgs-1]
	c.nameText = c.nameText[:names[len(names)-1]]
	c.nameEnds = append(c.nameEnds, names...)
	c.text = m.wire.Append(c.text)
	c.ends = append(c.ends, len(c.text))
}

// finish cuts the call's ARGV and KEYS from its buffers.
func (c *building) finish() *call {
	c.argv = cut(c.text, c.ends)
	c.names = cut(c.nameText, c.nameEnds)
	per := len(c.names) / len(c.argv) // key names a message
	for j := range c.argv {
		// Pointers, not strings, to box: no allocation.
		for k := range per {
			c.args = append(c.args, &c.names[per*j+k])
		}
		c.args = append(c.args, &c.argv[j])
	}
	c.keys = c.names[:1]
	return c.call
}

// cut makes one string of buf and returns its pieces, each ending where
// ends says.
func cut(buf []byte, ends []int) []string {
	all, start := string(buf), 0
	out := make([]string, len(ends))
	for i, end := range ends {
		out[i], start = all[start:end], end
	}
	return out
}

// pipeline sends calls in one pipeline and decodes the replies. Calls that
// meet NOSCRIPT (a restarted or failed-over node) are sent again with EVAL,
// which also loads the script there; messages are idempotent, so a call
// that did run is harmless to repeat.
func (t *transport) pipeline(ctx context.Context, rdb hybridlimit.Redis, calls []*call) error {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntSliceCmd, len(calls))
	for i, c := range calls {
		cmds[i] = t.script.EvalShaInts(ctx, pipe, c.keys, c.args)
	}
	durable := make([]error, len(calls))
	wait := t.waitReplicas(ctx, rdb, pipe)
	_, _ = pipe.Exec(ctx)
	var retry []int
	for i, cmd := range cmds {
		if scripts.IsNoScript(cmd.Err()) {
			retry = append(retry, i)
		} else {
			durable[i] = wait()
		}
	}
	if len(retry) > 0 {
		pipe = rdb.Pipeline()
		for _, i := range retry {
			cmds[i] = t.script.EvalInts(ctx, pipe, calls[i].keys, calls[i].args)
		}
		wait := t.waitReplicas(ctx, rdb, pipe)
		_, _ = pipe.Exec(ctx)
		for _, i := range retry {
			durable[i] = wait()
		}
	}
	var errs []error
	for i, cmd := range cmds {
		if err := t.receive(cmd, durable[i], calls[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// receive stores the reply of c, its command cmd, in c's messages, or
// records why there is none: the command's error, or durable's, WAIT's.
func (t *transport) receive(cmd *redis.IntSliceCmd, durable error, c *call) error {
	reply, err := scripts.IntsReply(cmd)
	if err == nil {
		err = durable
	}
	if err == nil {
		err = decodeInto(reply, c)
	} else {
		scripts.NoteError(t.rdb, err) // a dead master: learn who took over
	}
	if err != nil {
		t.stats.countError(err)
	}
	c.err = err
	return err
}

// errNotDurable is wrapped by the errors of sync calls whose writes fewer
// replicas than WithDurableSync asks for acknowledged in time (counted as
// ErrorTimeout).
var errNotDurable = errors.New("sync: writes not acknowledged by enough replicas")

// waitReplicas adds WAIT to pipe when durable sync is on, and returns what
// reports its outcome once pipe ran: nil when enough replicas have the
// writes of the pipeline's connection. Without durable sync it adds
// nothing and reports nil. A cluster client's pipeline spreads over nodes,
// so WAIT is added only to a node's own client (see byNode).
func (t *transport) waitReplicas(ctx context.Context, rdb hybridlimit.Redis, pipe redis.Pipeliner) func() error {
	d := t.durable
	if d.replicas == 0 {
		return func() error { return nil }
	}
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		// byNode found no node for these calls: no promise to keep.
		return func() error { return fmt.Errorf("%w: no node known for the keys", errNotDurable) }
	}
	cmd := pipe.Do(ctx, "WAIT", d.replicas, d.timeout.Milliseconds())
	return func() error {
		n, err := cmd.Int()
		if err != nil {
			return fmt.Errorf("sync: WAIT: %w", err)
		}
		if n < d.replicas {
			return fmt.Errorf("%w: %d of %d within %v", errNotDurable, n, d.replicas, d.timeout)
		}
		return nil
	}
}

// decodeInto checks a call's reply and stores each message's part in it;
// a message answered elsewhere gets none, and goes to c.moved.
func decodeInto(reply []int64, c *call) error {
	replies := make([]scripts.SyncReply, len(c.msgs))
	if err := scripts.ParseSyncReplies(reply, replies); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	for i, m := range c.msgs {
		if replies[i].Elsewhere {
			c.moved = append(c.moved, m)
			continue
		}
		m.reply, m.ok = replies[i], true
	}
	return nil
}
