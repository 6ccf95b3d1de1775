package sync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// node is a Redis master as the limiter reaches it, with a breaker of its
// own: a dead or stalled master hands only the keys whose slots it serves
// to the failure policy, and keys on the other masters keep syncing. On a
// client that is not a cluster client there is one node.
type node struct {
	addr    string
	group   int // a slot group the node serves, whose probe key it is asked with
	breaker breaker
	probing atomic.Bool // a probe of the node is in flight
}

// nodes maps each slot group to the node serving it.
type nodes struct {
	mu      stdsync.Mutex
	byAddr  map[string]*node
	ofGroup []atomic.Pointer[node]
	// known says every group's master came from the cluster's slot map
	// at the last refresh (on a cluster client).
	known atomic.Bool
	// Counts of every node's breaker switches and open time, which
	// outlive the nodes (a master replaced by its replica leaves).
	opens, closes atomic.Uint64
	openTotal     atomic.Int64 // nanoseconds, closed stretches only
	log           *slog.Logger
	after         time.Duration
}

// init points every slot group at one node, named addr, until refresh
// learns the cluster's slot map.
func (ns *nodes) init(groups int, addr string, log *slog.Logger, after time.Duration) {
	ns.log, ns.after = log, after
	ns.byAddr = make(map[string]*node)
	ns.ofGroup = make([]atomic.Pointer[node], groups)
	n := ns.get(addr, 0)
	for g := range ns.ofGroup {
		ns.ofGroup[g].Store(n)
	}
}

// get returns the node called addr, making it. The caller holds ns.mu, or
// is init.
func (ns *nodes) get(addr string, group int) *node {
	n := ns.byAddr[addr]
	if n == nil {
		n = &node{addr: addr, group: group}
		n.breaker.init(ns, addr)
		ns.byAddr[addr] = n
	}
	return n
}

// of returns the node serving slot group g.
func (ns *nodes) of(g int) *node { return ns.ofGroup[g].Load() }

// refresh points each slot group at the master that serves its slot now,
// as the cluster client's slot map says (it learns of a failover from
// the errors of calls to the old master, see scripts.NoteError). Nodes that
// serve no group any more are forgotten, their time open counted.
func (ns *nodes) refresh(ctx context.Context, cc masterForKey, keys []string, now time.Time) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	known := true
	for g := range ns.ofGroup {
		c, err := cc.MasterForKey(ctx, keys[g])
		if err != nil {
			known = false
			continue // no slot map yet: the node it had, or the seed one
		}
		if addr := c.Options().Addr; ns.ofGroup[g].Load().addr != addr {
			ns.ofGroup[g].Store(ns.get(addr, g))
		}
	}
	ns.known.Store(known)
	serving := make(map[*node]bool, len(ns.byAddr))
	for g := range ns.ofGroup {
		serving[ns.ofGroup[g].Load()] = true
	}
	for addr, n := range ns.byAddr {
		if !serving[n] {
			ns.openTotal.Add(int64(n.breaker.openFor(now)))
			delete(ns.byAddr, addr)
		}
	}
}

// all returns the nodes known now, by address.
func (ns *nodes) all() []*node {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	out := make([]*node, 0, len(ns.byAddr))
	for _, n := range ns.byAddr {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *node) int { return strings.Compare(a.addr, b.addr) })
	return out
}

// nodeName returns what to call the one node of a client that is not a
// cluster client: its address when it has one.
func nodeName(rdb hybridlimit.Redis) string {
	if c, ok := rdb.(interface{ Options() *redis.Options }); ok {
		return c.Options().Addr
	}
	return "redis"
}

// probe asks node n, in a goroutine of the loop's, whether it takes
// writes again: the presence script on a key of a slot group n serves,
// which fails whenever a sync call would (out of memory, a stalled or dead
// master). Its success closes n's breaker. One probe of a node is in
// flight at a time; l.probes counts them for the loop and Close, which
// wait for them.
func (l *Limiter) probe(n *node) {
	if !n.probing.CompareAndSwap(false, true) {
		return
	}
	l.probes.Add(1)
	go func() {
		defer l.probes.Done()
		defer n.probing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.roundTimeout)
		defer cancel()
		_ = l.probeNode(ctx, n)
	}()
}

// probeNode runs the probe of node n and tells its breaker the outcome.
func (l *Limiter) probeNode(ctx context.Context, n *node) error {
	life := 3*l.cfg.interval + l.cfg.roundTimeout
	_, err := scripts.Presence.Run(ctx, l.rdb, []string{l.probeKeys[n.group]}, 0, l.cfg.instanceID, life.Microseconds(), "1")
	if err != nil {
		l.stats.countError(err)
		scripts.NoteError(l.rdb, err)
	}
	n.breaker.outcome(l.cfg.clock.Now(), err)
	return err
}

// Ping checks that every master serving the limiter's slot groups (or the
// one server) takes its writes. New and Start never wait for Redis: a
// service that must not start blind calls Ping first. The error wraps
// hybridlimit.ErrUnavailable and names each node that failed.
func (l *Limiter) Ping(ctx context.Context) error {
	if l.closed.Load() {
		return ErrClosed
	}
	l.refreshNodes(ctx, l.cfg.clock.Now())
	var errs []error
	for _, n := range l.nodes.all() {
		if err := l.probeNode(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("sync: ping %s: %w: %w", n.addr, hybridlimit.ErrUnavailable, err))
		}
	}
	return errors.Join(errs...)
}

// breaker keeps one node off the request path once calls to it have
// failed for a while, and lets it back after the first call that
// succeeds: a sync call of a round, or the probe the loop sends every tick
// while the breaker is open. Failures must span `after` (the sync
// interval) before it opens, so a slow first call on a cold connection
// does not hand decisions to the failure policy; until then a decision
// whose fetch fails is decided by the failure policy all the same.
type breaker struct {
	open      atomic.Bool
	mu        stdsync.Mutex
	failures  int
	firstFail time.Time
	openedAt  time.Time     // when the current open stretch began
	openTotal time.Duration // earlier open stretches
	nodes     *nodes
	addr      string
}

func (b *breaker) init(ns *nodes, addr string) { b.nodes, b.addr = ns, addr }

func (b *breaker) isOpen() bool { return b.open.Load() }

// openFor returns the time the breaker has been open in all, until now.
func (b *breaker) openFor(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := b.openTotal
	if b.open.Load() {
		d += now.Sub(b.openedAt)
	}
	return d
}

// outcome counts the outcome of a call to the node made at now.
func (b *breaker) outcome(now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.failures = 0
		if b.open.Swap(false) {
			b.openTotal += now.Sub(b.openedAt)
			b.nodes.closes.Add(1)
			b.nodes.log.Info("sync: Redis node reachable again; breaker closed", "node", b.addr, "open", now.Sub(b.openedAt))
		}
		return
	}
	if b.failures == 0 {
		b.firstFail = now
	}
	b.failures++
	if b.failures >= 2 && now.Sub(b.firstFail) >= b.nodes.after && !b.open.Swap(true) {
		b.openedAt = now
		b.nodes.opens.Add(1)
		b.nodes.log.Warn("sync: Redis node failing; breaker open, failure policy deciding for its keys", "node", b.addr, "err", err)
	}
}
