package sim

import (
	"context"
	"net"
	"strconv"
	"strings"
	stdsync "sync"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// cmdCounter counts the Redis commands its clients send, per hash slot of
// each command's first key, as a go-redis hook (ProcessHook and
// ProcessPipelineHook). It counts at the client, so on a cluster it must
// hook each node's client (ClusterClient.OnNewNode) to count what every
// server receives. The commands a client sends on its own, to set up a
// connection (HELLO, AUTH, CLIENT ...) or follow the slot map (CLUSTER,
// ASKING), are not counted: they are the client's, not the limiter's.
//
// The zero cmdCounter is paused; newCmdCounter returns one that counts. A
// cmdCounter is safe for concurrent use.
type cmdCounter struct {
	mu     stdsync.Mutex
	on     bool
	phase  phase
	total  int64
	work   int64         // key messages, and keyless commands
	upkeep int64         // of work, the hybrid's presence calls
	slots  map[int]int64 // key messages by slot
	calls  map[int]int64 // commands on keys, by the slot of their first key
	phases [phases]int64
	keys   map[string]*[phases]int64 // nil unless detailed
	msgs   map[string]*msgCounts     // by bucket key; nil unless detailed
}

// phase says what the limiters were doing when a command was sent, for
// diagnostics: the virtual engine sets it around each step.
type phase int

// The phases.
const (
	// phaseDecision: inside a decision (an exact script), or a hybrid
	// round that decisions out of allowance wait for (a fetch).
	phaseDecision phase = iota
	// phaseRound: a background reconcile round no decision waits for.
	phaseRound
	// phasePresence: the loop's other work: presence, automatic sharding.
	phasePresence
	phases
)

func (p phase) String() string {
	return [...]string{"decision", "round", "presence"}[p]
}

// newCmdCounter returns a cmdCounter that counts from the start. With
// detail, it also counts, per phase, the commands that carry each Redis
// key, and the sync script's key messages by kind.
func newCmdCounter(detail bool) *cmdCounter {
	c := &cmdCounter{on: true}
	if detail {
		c.keys = map[string]*[phases]int64{}
		c.msgs = map[string]*msgCounts{}
	}
	return c
}

// SetPhase labels the commands counted from now on.
func (c *cmdCounter) SetPhase(p phase) { c.mu.Lock(); c.phase = p; c.mu.Unlock() }

// ByPhase returns the commands counted in each phase.
func (c *cmdCounter) ByPhase() [phases]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.phases
}

// KeyCommands returns, for each Redis key, the commands that carried it in
// each phase (empty unless the cmdCounter counts in detail).
func (c *cmdCounter) KeyCommands() map[string][phases]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][phases]int64, len(c.keys))
	for k, v := range c.keys {
		out[k] = *v
	}
	return out
}

// Messages returns, for each hybrid key's bucket, its sync messages by
// phase and kind (empty unless the cmdCounter counts in detail).
func (c *cmdCounter) Messages() map[string]msgCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]msgCounts, len(c.msgs))
	for k, v := range c.msgs {
		out[k] = *v
	}
	return out
}

// Pause stops counting (for setup and teardown traffic); Resume restarts it.
func (c *cmdCounter) Pause()  { c.mu.Lock(); c.on = false; c.mu.Unlock() }
func (c *cmdCounter) Resume() { c.mu.Lock(); c.on = true; c.mu.Unlock() }

// Total returns the commands counted.
func (c *cmdCounter) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Work returns the key messages counted (one for a command on a key, one
// per key for a sync call) and the keyless commands: the units of work
// Redis ran, whatever the number of commands that carried them.
func (c *cmdCounter) Work() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.work
}

// Upkeep returns the hybrid's presence calls counted: one an instance and
// sync interval, whatever the keys and traffic (design 6.7).
func (c *cmdCounter) Upkeep() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.upkeep
}

// HottestSlotShare returns the busiest slot's share of the work counted,
// 0 if none: of the key messages (one for a command on a key, one per key
// for a sync call, which carries many slots' keys) and of the keyless
// commands, which count in no slot. It is the share of Redis's work that
// one slot, so one cluster node, cannot shed.
func (c *cmdCounter) HottestSlotShare() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var most int64
	for _, n := range c.slots {
		most = max(most, n)
	}
	if c.work == 0 {
		return 0
	}
	return float64(most) / float64(c.work)
}

// Nodes returns the key messages and the commands on keys counted on each
// of n nodes, nodeOf naming the node of a slot. A command's keys all lie on
// one node (a cluster refuses any other), so the slot of its first key
// names the node that ran it. Keyless commands count on no node.
func (c *cmdCounter) Nodes(n int, nodeOf func(slot int) int) []NodeLoad {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]NodeLoad, n)
	for s, m := range c.slots {
		out[nodeOf(s)].KeyMessages += m
	}
	for s, m := range c.calls {
		out[nodeOf(s)].Calls += m
	}
	return out
}

func (c *cmdCounter) count(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return
	}
	for _, cmd := range cmds {
		args := cmd.Args()
		if handshake(args) {
			continue
		}
		c.total++
		c.phases[c.phase]++
		if c.slots == nil {
			c.slots, c.calls = map[int]int64{}, map[int]int64{}
		}
		_, buckets := syncCall(args)
		switch key, ok := firstKey(args); {
		case buckets != nil:
			for _, b := range buckets {
				c.slots[hybridlimit.Slot(b)]++
			}
			c.work += int64(len(buckets))
			if len(buckets) > 0 {
				c.calls[hybridlimit.Slot(buckets[0])]++
			}
		case ok:
			s := hybridlimit.Slot(key)
			c.slots[s]++
			c.calls[s]++
			c.work++
			if presenceCall(args) {
				c.upkeep++
			}
		default:
			c.work++
		}
		if c.keys != nil {
			keys := buckets
			if keys == nil {
				keys = scriptKeys(args)
			}
			for _, k := range keys {
				n := c.keys[k]
				if n == nil {
					n = new([phases]int64)
					c.keys[k] = n
				}
				n[c.phase]++
			}
		}
	}
}

// classifyReplies counts the sync messages of commands whose replies are in.
func (c *cmdCounter) classifyReplies(cmds ...redis.Cmder) {
	if c.msgs == nil {
		return
	}
	for _, cmd := range cmds {
		buckets, kinds := classify(cmd)
		if buckets == nil {
			continue
		}
		c.mu.Lock()
		if c.on {
			for i, b := range buckets {
				n := c.msgs[b]
				if n == nil {
					n = new(msgCounts)
					c.msgs[b] = n
				}
				n[c.phase][kinds[i]]++
			}
		}
		c.mu.Unlock()
	}
}

// scriptKeys returns the KEYS of an EVAL or EVALSHA.
func scriptKeys(args []any) []string {
	if len(args) < 3 {
		return nil
	}
	if name, _ := args[0].(string); !strings.HasPrefix(strings.ToLower(name), "eval") {
		return nil
	}
	n, err := strconv.Atoi(asString(args[2]))
	if err != nil || n < 0 || 3+n > len(args) {
		return nil
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = asString(args[3+i])
	}
	return keys
}

// presenceCall reports whether a command runs the presence script.
func presenceCall(args []any) bool {
	switch name, body := strings.ToLower(asString(args[0])), asString(args[1]); name {
	case "evalsha":
		return body == scripts.Presence.Hash()
	case "eval":
		return body == scripts.Presence.Source()
	}
	return false
}

// handshake reports whether a command is one a client sends on its own as
// it sets up a connection (HELLO, AUTH, SELECT, READONLY, CLIENT ...) or
// follows a cluster's slot map (CLUSTER SLOTS, ASKING).
func handshake(args []any) bool {
	if len(args) == 0 {
		return true
	}
	name, _ := args[0].(string)
	switch strings.ToLower(name) {
	case "hello", "auth", "select", "readonly", "client", "cluster", "asking":
		return true
	}
	return false
}

// firstKey returns the first key of a command: argument 3 of EVAL and
// EVALSHA (after the script and the key count), argument 1 of the plain
// commands the limiters send. Keyless commands, WAIT after durable sync's
// calls among them, have none: their arguments are not keys.
func firstKey(args []any) (string, bool) {
	if len(args) < 2 {
		return "", false
	}
	name, _ := args[0].(string)
	i := 1
	switch strings.ToLower(name) {
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
		if len(args) < 4 || asString(args[2]) == "0" {
			return "", false
		}
		i = 3
	case "ping", "hello", "client", "script", "info", "cluster", "command", "select", "auth", "readonly", "wait", "waitaof":
		return "", false
	}
	return asString(args[i]), true
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case *string:
		if x != nil {
			return *x
		}
	case []byte:
		return string(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// Hook returns the go-redis hook that feeds the cmdCounter.
func (c *cmdCounter) Hook() redis.Hook { return counterHook{c} }

type counterHook struct{ c *cmdCounter }

func (h counterHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h counterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.c.count(cmd)
		err := next(ctx, cmd)
		h.c.classifyReplies(cmd)
		return err
	}
}

func (h counterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.c.count(cmds...)
		err := next(ctx, cmds)
		h.c.classifyReplies(cmds...)
		return err
	}
}
