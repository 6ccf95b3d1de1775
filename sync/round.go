package sync

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	stdsync "sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/lua"
)

// message is what one round says to Redis about one entry.
type message struct {
	e     *entry
	limit hybridlimit.Limit  // the part's
	key   *hybridlimit.Limit // the key's, as the message was prepared
	seq   int64
	base  int64         // the ledger total as the instance last heard it
	value int64         // Reserve: tokens wanted granted in all; Optimistic: tokens admitted in all
	held  int64         // Optimistic: allowance unspent when the message was prepared
	owed  int64         // the entry's owed when the message was prepared
	age   time.Duration // since the first of owed was admitted
	reply [lua.SyncReplyLen]int64
	ok    bool
}

// round is one reconcile round: the messages prepared at one time, sent as
// one script call per slot group and WithMaxKeysPerCall keys, and applied
// when the replies arrive. Preparing, sending and applying are separate
// steps so that a simulator can put virtual time between them.
type round struct {
	l    *Limiter
	msgs []message
	// rejoin holds the keys of entries that heard nothing from Redis for
	// too long to trust their moved layout (see prepare).
	rejoin []string
}

// pipelineCalls bounds the script calls in one pipeline, and
// pipelineParallel the pipelines in flight at once.
const (
	pipelineCalls    = 64
	pipelineParallel = 4
)

// roundOf prepares, sends and applies one round for entries.
func (l *Limiter) roundOf(ctx context.Context, entries []*entry, final bool) error {
	r := l.prepare(l.cfg.clock.Now(), entries, final)
	err := r.exec(ctx)
	r.apply(l.cfg.clock.Now())
	return err
}

// prepare computes a message for each entry that has something to say,
// marks them in flight, and returns the round. In Reserve mode it first
// takes back from the local counters any allowance it is about to return,
// so that no reply, lost or late, can let this instance spend it.
func (l *Limiter) prepare(now time.Time, entries []*entry, final bool) *round {
	// Most entries due in a steady round have nothing to say: sized for
	// all of them, the slice cost a round more than composing.
	r := &round{l: l}
	for _, e := range entries {
		l.lock(e)
		if e.inflight || e.dead.Load() {
			e.flagged = false
			l.unlock(e)
			continue
		}
		last := final
		if l.outOfTouch(e, now) {
			// A moved layout's markers, which send its instances on when
			// the key moves again, are not renewed: after a gap this long
			// they may have lapsed, and a lapsed marker reads as a full
			// bucket. Go back through the configured layout, whose markers
			// are kept, rather than spend a layout no one else uses.
			r.rejoin = append(r.rejoin, e.owner)
			if !e.unacked {
				e.flagged, e.waiting = false, 0
				l.sched.at(e, l.nanos(now)) // again next tick, if the move waits
				l.unlock(e)
				continue
			}
			// Its last message may have been granted, the reply lost: hand
			// everything back and ask for nothing, so that the reply's
			// total recovers the grant (and a lapsed bucket grants none)
			// before the move.
			last = true
		}
		if l.cfg.mode == Optimistic && l.cfg.overshoot >= 0 && time.Duration(l.nanos(now)-e.grantAt) >= l.allowanceLife()/2 {
			// Half-way to lapsing in Redis and not renewed: stop spending
			// it, with half a life of margin for a late round.
			e.take(e.avail.Load())
		}
		if !final && l.looping.Load() && l.nodes.of(int(e.group)).breaker.isOpen() {
			// Its node is failing: the loop's probe asks it, not a round
			// every other node's keys would wait for. Without the loop the
			// rounds themselves are the probe.
			e.flagged, e.waiting = false, 0
			l.sched.at(e, l.nanos(now.Add(l.cfg.interval)))
			l.unlock(e)
			continue
		}
		m, send := l.compose(now, e, last)
		e.flagged, e.waiting = false, 0
		if !send && e.avail.Load() > 0 {
			// Nothing to say yet: look again when the allowance may run
			// low. An entry that holds none waits for a decision to flag
			// it instead.
			l.sched.at(e, l.nanos(now.Add(l.quietFor(e, partLimit(e), now))))
		}
		if send {
			if l.cfg.auto.Max > 0 {
				l.heat.add(e.owner)
			}
			m.e = e
			m.key = e.limit.Load()
			m.seq = l.seq.Add(1)
			e.inflight = true
			e.sentAt = l.nanos(now)
			r.msgs = append(r.msgs, m)
		}
		l.unlock(e)
	}
	return r
}

// outOfTouch reports whether e is in a moved layout of its key that has
// heard nothing from Redis for half a marker's life. The key's home entry
// speaks for the layout: a part asked rarely is not out of touch while
// home syncs. The caller holds e.mu.
func (l *Limiter) outOfTouch(e *entry, now time.Time) bool {
	if e.gen == 0 {
		return false
	}
	heard := e.heardAt.Load()
	if h := l.table.get(e.owner); h != nil && h.layout() == e.layout() {
		heard = max(heard, h.heardAt.Load())
	}
	return time.Duration(l.nanos(now)-heard) >= l.markerLife(*e.limit.Load())/2
}

// compose computes e's message. The caller holds e.mu.
func (l *Limiter) compose(now time.Time, e *entry, final bool) (message, bool) {
	limit := partLimit(e)
	consumed := e.consumed()
	t := l.nanos(now)
	dt := time.Duration(t - e.lastAt)
	// Demand is measured over the time since consumption was last seen,
	// not since the last round (one request on a quiet key is not a burst
	// of demand), and over half an interval at least.
	used := float64(max(consumed-e.lastUsed, 0))
	window := max(dt, time.Duration(t-e.usedAt), l.cfg.interval/2).Seconds()
	switch {
	case dt >= l.cfg.interval/2:
		rate := used / window
		e.demand = max(rate, (e.demand+rate)/2) // rise at once, decay by halves
		if consumed != e.lastUsed {
			e.usedAt = t
		}
		e.lastUsed, e.lastAt = consumed, t
	case dt >= time.Millisecond && used/window > e.demand:
		// A key fetching again before half an interval is out: let its
		// lease grow now rather than after a string of small fetches. Over
		// half an interval: a token spent in a key's first milliseconds is
		// not a burst that should lease the whole bucket away from the
		// other instances.
		e.demand = used / window
	}
	// What the failure policy admitted Redis takes whatever the bucket
	// holds, as of when it was admitted; in Reserve mode on top of every
	// grant this instance heard of (restated, should a failover have lost
	// it).
	m := message{limit: limit, base: e.acked}
	if d := l.debts.get(e); d != nil && d.owed > 0 {
		m.owed, m.age = d.owed, time.Duration(t-d.since)
	}
	if l.cfg.mode == Optimistic {
		if final {
			e.settle(func(int64) int64 { return 0 })
			m.held = -1 // closing: record no allowance
		} else if l.cfg.overshoot >= 0 {
			// Redis never records less than what the message says is held
			// (it may be spent before the reply): keep no more than twice
			// the demand, or one instance keeps the pool it was granted
			// alone and starves those that come later. At least the
			// minimum lease stays, which a quiet or low-limit key (no
			// lease) spends from next rather than be denied.
			keep := max(e.waiting+l.lease(e, limit, now), l.minLease(limit), 1)
			if a := e.avail.Load(); a > 2*keep {
				e.take(a - keep)
			}
		}
		held, consumed := e.snapshot()
		if !final {
			m.held = held
		}
		m.value = consumed
		e.sent = consumed
		expiring := l.cfg.overshoot >= 0 && held > 0 && time.Duration(t-e.grantAt) >= l.allowanceLife()/5
		// A flagged key found its allowance spent: ask for more even with
		// nothing to report.
		return m, !e.synced.Load() || e.unacked || consumed != e.acked || final || expiring || e.flagged
	}
	held := max(e.avail.Load(), 0)
	// Closing: hand everything back and ask for nothing, not even for
	// decisions that waited (they have given up or will get ErrClosed).
	var want int64
	if !final {
		want = e.waiting + l.lease(e, limit, now)
	}
	want = min(want, limit.Burst)
	switch {
	case held > 2*want || (want == 0 && held > 0):
		e.take(held - want)
	case e.waiting > 0 || float64(held) < l.lowMark(e, want):
		if held < want {
			m.value = e.issued + want - held
			return m, true
		}
	}
	m.value = e.issued
	return m, m.value != e.acked || m.owed > 0 || e.unacked || !e.synced.Load() && e.waiting > 0
}

// lease returns what e holds ahead of demand in Reserve mode: its recent
// demand over the lease lookahead, stretched while its bucket has room
// (stretch), at least the minimum lease; nothing for a key idle past the
// idle hold, under the low-limit rule, or a part of a split key that is
// not serving. The caller holds e.mu.
func (l *Limiter) lease(e *entry, limit hybridlimit.Limit, now time.Time) int64 {
	// A split key's parts other than home serve only while home is dry
	// (Redis said empty): then they lease as home would, else they fetch
	// only what waits, so a split key costs each instance the messages of
	// one part at a time, not of all.
	serving := e.key == e.owner || l.homeDry(e.owner, now)
	if !serving || time.Duration(l.nanos(now)-e.usedAt) >= l.idleHold() || l.lowLimit(e, limit) {
		return 0
	}
	lease := e.demand * l.cfg.lookahead * l.cfg.interval.Seconds()
	return max(int64(math.Ceil(lease*l.stretch(e, lease))), l.minLease(limit))
}

// lowMark is what e holds when it tops up to want: half of it, or an
// interval and a half of demand if that is more. Topping up only then, not
// for every token spent, is what lets a slow key holding its minimum lease
// sync every few seconds rather than every interval.
func (l *Limiter) lowMark(e *entry, want int64) float64 {
	return max(float64(want/2), e.demand*1.5*l.cfg.interval.Seconds())
}

// homeDry reports whether the home part of split key is empty by Redis's
// last word.
func (l *Limiter) homeDry(key string, now time.Time) bool {
	h := l.table.get(key)
	return h != nil && h.denyUntil.Load() > l.nanos(now)
}

// Lease sizing.
const (
	// maxMinLease is the most a key holds for the mere fact of being in
	// use, whatever its measured demand.
	maxMinLease = 8
	// idleHoldIntervals and minIdleHold set how long a key without
	// consumption keeps its lease before handing it back (see idleHold).
	idleHoldIntervals = 40
	minIdleHold       = 10 * time.Second
)

// idleHold is how long a key keeps its minimum lease without consumption:
// 40 sync intervals, at least 10 seconds, so a quiet key pays one fetch per
// burst of use rather than one per request; twice as long evicts it from
// memory. The minimum leases of all instances hold at most a quarter of a
// key's burst, which bounds what idle instances keep from busy ones.
func (l *Limiter) idleHold() time.Duration {
	return max(idleHoldIntervals*l.cfg.interval, minIdleHold)
}

// stretch returns how many times lease e may hold: the largest power of
// two, up to WithLeaseStretch's cap, for which every live instance holding
// that many leases would take at most an eighth of what the key's bucket
// held at its last sync. A key far under its limit then tops up every few
// seconds rather than every interval, which is most of what a round of an
// instance with many such keys costs; as the bucket drains the factor
// falls back to 1, and what a key holds beyond twice its lease goes back
// at its next sync.
func (l *Limiter) stretch(e *entry, lease float64) float64 {
	room := float64(e.partLeft.Load()) / 8
	all := lease * float64(max(l.live.Load(), 1))
	s := 1.0
	for 2*s <= l.cfg.stretch && 2*s*all <= room {
		s *= 2
	}
	return s
}

// minLease returns what a key in use holds at least: maxMinLease tokens,
// or a quarter of this instance's share of the burst if that is less, so
// the minimum leases of all instances together hold at most a quarter of
// the burst.
func (l *Limiter) minLease(limit hybridlimit.Limit) int64 {
	return min(maxMinLease, limit.Burst/(4*max(l.live.Load(), 1)))
}

// lowLimit reports whether e's part of its key's limit is too low to lease
// ahead of demand: fewer than the low-limit threshold of tokens per
// instance per interval. The parts of a split key each serve the instances
// whose home they are, about live/shards of them, so a split leaves the
// rule where it was for the key.
func (l *Limiter) lowLimit(e *entry, limit hybridlimit.Limit) bool {
	// Not rounded: with fewer instances than parts, a whole one per part
	// made a split key exact where the whole key leased.
	users := float64(max(l.live.Load(), 1)) / float64(max(e.shards, 1))
	return limit.TokensIn(l.cfg.interval)/users < l.cfg.lowLimit
}

// exec sends the round's messages and stores the replies in them. A call
// that fails leaves its messages without a reply; the next round says the
// same in absolute terms, so nothing is lost and nothing counts twice.
func (r *round) exec(ctx context.Context) error {
	if len(r.msgs) == 0 {
		return nil
	}
	defer r.l.stats.observeRound(time.Now(), len(r.msgs))
	calls := r.batches()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(pipelineParallel)
	var mu stdsync.Mutex
	var errs []error
	for node, calls := range r.l.byNode(ctx, calls) {
		for i := 0; i*pipelineCalls < len(calls); i++ {
			part := calls[i*pipelineCalls : min((i+1)*pipelineCalls, len(calls))]
			g.Go(func() error {
				if err := r.l.pipeline(ctx, node, part); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				return nil
			})
		}
	}
	_ = g.Wait()
	r.l.stats.scriptCalls.Add(uint64(len(calls)))
	r.l.judgeNodes(calls)
	return errors.Join(errs...)
}

// judgeNodes tells each node's breaker how its calls in a round went: well
// if any of them was answered, else with the first call's error. A call
// cut short by its caller (the loop's ctx ended) says nothing of Redis.
func (l *Limiter) judgeNodes(calls []*call) {
	now := l.cfg.clock.Now()
	answered := make(map[*node]bool)
	failed := make(map[*node]error)
	for _, c := range calls {
		n := l.nodes.of(int(c.msgs[0].e.group))
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
func (l *Limiter) byNode(ctx context.Context, calls []*call) map[hybridlimit.Redis][]*call {
	cc, cluster := l.rdb.(masterForKey)
	if l.cfg.durable.replicas == 0 || !cluster {
		return map[hybridlimit.Redis][]*call{l.rdb: calls}
	}
	out := make(map[hybridlimit.Redis][]*call)
	for _, c := range calls {
		var node hybridlimit.Redis = l.rdb // no node known: the calls fail (waitReplicas) and go again next round
		if n, err := cc.MasterForKey(ctx, c.keys[0]); err == nil {
			node = n
		}
		out[node] = append(out[node], c)
	}
	return out
}

// call is one script call: the messages of one slot group, in order.
type call struct {
	msgs []*message
	keys []string
	argv []string // one message per key (lua.SyncMsg)
	args []any    // the header, then a pointer to each of argv
	err  error    // why the call got no usable reply, once sent
}

// batches splits the messages into script calls by slot group. Each
// message's integers are written as text into one buffer per call, and its
// two key names into another; each buffer becomes one string that the
// call's ARGV and KEYS slice, and the command refers to them by pointer,
// which an interface holds without copying. So a call costs a few
// allocations whatever its number of messages, where ten boxed integers
// a message, their reply and three key names kept by each entry cost
// fourteen allocations a message and 160 bytes an entry.
func (r *round) batches() []*call {
	mode := "r"
	if r.l.cfg.mode == Optimistic {
		mode = "o"
	}
	header := [lua.SyncHeaderArgs]any{0, r.l.ledgerTTL(), mode, r.l.cfg.instanceID, r.l.allowanceLife().Microseconds()}
	// A script call may touch one slot only on a cluster; elsewhere one
	// call carries every group's messages (WithMaxKeysPerCall at a time).
	group := func(m *message) int { return int(m.e.group) }
	if !r.l.perSlot {
		group = func(*message) int { return 0 }
	}
	perGroup := make(map[int]int)
	for i := range r.msgs {
		perGroup[group(&r.msgs[i])]++
	}
	type building struct {
		*call
		text  []byte // the messages' ARGV, end to end
		ends  []int  // where each ends in text
		names []byte // the messages' KEYS, end to end
		nends []int  // where each ends in names
	}
	open := make(map[int]*building, len(perGroup))
	var all []*building
	for i := range r.msgs {
		m := &r.msgs[i]
		g := group(m)
		c := open[g]
		if c == nil || len(c.msgs) == r.l.cfg.maxKeysPerCall {
			n := min(perGroup[g], r.l.cfg.maxKeysPerCall)
			perGroup[g] -= n
			c = &building{
				call: &call{
					msgs: make([]*message, 0, n),
					args: append(make([]any, 0, len(header)+n), header[:]...),
				},
				text:  make([]byte, 0, 64*n),
				ends:  make([]int, 0, n),
				names: make([]byte, 0, lua.SyncKeys*48*n),
				nends: make([]int, 0, lua.SyncKeys*n),
			}
			open[g] = c
			all = append(all, c)
		}
		c.msgs = append(c.msgs, m)
		var ends [lua.SyncKeys]int
		c.names, ends = r.l.appendPartKeys(c.names, m.e.owner, int(m.e.shard), m.e.layout(), int(m.e.group))
		c.nends = append(c.nends, ends[:]...)
		msg := lua.SyncMsg{
			Rate: m.limit.Rate, PeriodUS: m.limit.Period.Microseconds(), Burst: m.limit.Burst,
			Seq: m.seq, Epoch: m.e.epoch, Base: m.base, Value: m.value,
			Budget: r.l.budget(m.limit), Held: m.held, Owed: m.owed, AgeUS: m.age.Microseconds(),
		}
		c.text = msg.Append(c.text)
		c.ends = append(c.ends, len(c.text))
	}
	calls := make([]*call, len(all))
	for i, c := range all {
		c.argv = cut(c.text, c.ends)
		for j := range c.argv {
			c.args = append(c.args, &c.argv[j]) // a pointer, not a string, to box: no allocation
		}
		c.keys = cut(c.names, c.nends)
		calls[i] = c.call
	}
	return calls
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

// budget returns the overshoot budget in tokens for limit, or -1 for none.
func (l *Limiter) budget(limit hybridlimit.Limit) int64 {
	if l.cfg.overshoot < 0 {
		return -1
	}
	return int64(l.cfg.overshoot * float64(limit.Burst))
}

// allowanceLife is how long an Optimistic allowance counts in Redis against
// the other instances' allowances. The instance renews it at a fifth of its
// life and stops spending it at half its life (see sweep), so what it spent
// is reported before the allowance stops counting unless its reports fail
// for some five intervals; a crashed instance's allowance holds others back
// for at most this long.
func (l *Limiter) allowanceLife() time.Duration {
	return 10*l.cfg.interval + l.cfg.roundTimeout
}

// ledgerTTL is how long a ledger outlives its last message, in
// milliseconds: long enough that no message still in flight can find it
// gone, and a ledger that does lapse only costs a full-total resend.
func (l *Limiter) ledgerTTL() int64 { return l.ledgerTTLDuration().Milliseconds() }

func (l *Limiter) ledgerTTLDuration() time.Duration { return max(time.Minute, 20*l.cfg.interval) }

// pipeline sends calls in one pipeline and decodes the replies. Calls that
// meet NOSCRIPT (a restarted or failed-over node) are sent again with EVAL,
// which also loads the script there; messages are idempotent, so a call
// that did run is harmless to repeat.
func (l *Limiter) pipeline(ctx context.Context, rdb hybridlimit.Redis, calls []*call) error {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntSliceCmd, len(calls))
	for i, c := range calls {
		cmds[i] = lua.Sync.EvalShaInts(ctx, pipe, c.keys, c.args)
	}
	durable := make([]error, len(calls))
	wait := l.waitReplicas(ctx, rdb, pipe)
	_, _ = pipe.Exec(ctx)
	var retry []int
	for i, cmd := range cmds {
		if lua.IsNoScript(cmd.Err()) {
			retry = append(retry, i)
		} else {
			durable[i] = wait()
		}
	}
	if len(retry) > 0 {
		pipe = rdb.Pipeline()
		for _, i := range retry {
			cmds[i] = lua.Sync.EvalInts(ctx, pipe, calls[i].keys, calls[i].args)
		}
		wait := l.waitReplicas(ctx, rdb, pipe)
		_, _ = pipe.Exec(ctx)
		for _, i := range retry {
			durable[i] = wait()
		}
	}
	var errs []error
	for i, cmd := range cmds {
		reply, err := lua.IntsReply(cmd)
		if err == nil {
			err = durable[i]
		}
		if err == nil {
			err = decodeInto(reply, calls[i].msgs)
		} else {
			lua.NoteError(l.rdb, err) // a dead master: learn who took over
		}
		if err != nil {
			l.stats.countError(err)
			errs = append(errs, err)
		}
		calls[i].err = err
	}
	return errors.Join(errs...)
}

// ErrNotDurable is wrapped by the errors of sync calls whose writes fewer
// replicas than WithDurableSync asks for acknowledged in time.
var ErrNotDurable = errors.New("sync: writes not acknowledged by enough replicas")

// waitReplicas adds WAIT to pipe when durable sync is on, and returns what
// reports its outcome once pipe ran: nil when enough replicas have the
// writes of the pipeline's connection. Without durable sync it adds
// nothing and reports nil. A cluster client's pipeline spreads over nodes,
// so WAIT is added only to a node's own client (see byNode).
func (l *Limiter) waitReplicas(ctx context.Context, rdb hybridlimit.Redis, pipe redis.Pipeliner) func() error {
	d := l.cfg.durable
	if d.replicas == 0 {
		return func() error { return nil }
	}
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		// byNode found no node for these calls: no promise to keep.
		return func() error { return fmt.Errorf("%w: no node known for the keys", ErrNotDurable) }
	}
	cmd := pipe.Do(ctx, "WAIT", d.replicas, d.timeout.Milliseconds())
	return func() error {
		n, err := cmd.Int()
		if err != nil {
			return fmt.Errorf("sync: WAIT: %w", err)
		}
		if n < d.replicas {
			return fmt.Errorf("%w: %d of %d within %v", ErrNotDurable, n, d.replicas, d.timeout)
		}
		return nil
	}
}

// decodeInto checks a call's reply, lua.SyncReplyLen integers per message,
// and stores each message's share in it.
func decodeInto(reply []int64, msgs []*message) error {
	n := len(msgs[0].reply)
	v, err := lua.DecodeInts(reply, n*len(msgs))
	if err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	for i, m := range msgs {
		copy(m.reply[:], v[n*i:n*i+n])
		for _, x := range m.reply {
			if x < 0 {
				return fmt.Errorf("sync: %w: negative field in %v", lua.ErrMalformedReply, m.reply)
			}
		}
		m.ok = true
	}
	return nil
}

// apply folds the replies into the entries and schedules their next sync.
func (r *round) apply(now time.Time) {
	l := r.l
	for i := range r.msgs {
		if m := &r.msgs[i]; m.ok && m.reply[7] > m.seq {
			// Not applied: the ledger is numbered past this message by an
			// earlier run of this instance (same id) whose clock was
			// ahead. Number on from there, under a new epoch (a new total),
			// and say it again: until then nothing is granted, and
			// nothing this instance admitted is counted.
			l.seqPast(m.reply[7])
			l.lock(m.e)
			m.e.epoch = l.seq.Add(1)
			l.unlock(m.e)
			m.ok = false
		}
	}
	for i := range r.msgs {
		if r.msgs[i].ok {
			l.stats.lastSuccess.Store(l.nanos(now) + 1) // 0 means never
			break
		}
	}
	var moved []*message
	var reset []*entry
	for i := range r.msgs {
		m := &r.msgs[i]
		e := m.e
		l.lock(e)
		e.inflight = false
		e.unacked = !m.ok
		next := l.nanos(now) // no reply: say it again next tick
		switch {
		case m.ok && m.reply[8] == 1:
			reset = append(reset, e)
		case m.ok:
			l.applyReply(now, e, m)
			if m.reply[5] > 0 {
				moved = append(moved, m)
			}
			next = e.nextSync
		}
		l.unlock(e)
		l.sched.at(e, next)
	}
	// In key order: a move numbers a new entry, so that a simulation in
	// virtual time replays exactly.
	slices.SortFunc(moved, func(a, b *message) int { return strings.Compare(a.e.owner, b.e.owner) })
	for _, m := range moved {
		// The part is closed: the key lives in the layout its marker names.
		l.move(m.e.owner, layout{int(m.reply[5]), int(m.reply[6])}, now)
	}
	for _, e := range reset {
		// The key was reset (Limiter.Reset) since this entry's ledger was
		// written: what it holds and owes is forgotten with it, and the
		// next decision starts afresh.
		l.drop(l.tableOf(e), e)
	}
	slices.Sort(r.rejoin)
	for _, key := range slices.Compact(r.rejoin) {
		l.moveBack(key, now)
	}
	l.movePending(now)
	l.stats.messages.Add(uint64(len(r.msgs)))
}

// seqPast raises the next sequence number above seq.
func (l *Limiter) seqPast(seq int64) {
	for {
		cur := l.seq.Load()
		if cur >= seq || l.seq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// applyReply folds one reply into e. The caller holds e.mu.
func (l *Limiter) applyReply(now time.Time, e *entry, m *message) {
	total, remaining, retryUS, resetUS, allowance := m.reply[0], m.reply[1], m.reply[2], m.reply[3], m.reply[4]
	e.acked = total
	e.heardAt.Store(l.nanos(now))
	e.synced.Store(true)
	// Taken, or reported; a closed part took nothing, and the move
	// carries it.
	l.debts.answered(e, m, m.reply[5] == 0, e.sentAt)
	if l.cfg.mode == Optimistic {
		// The allowance counts from the consumption the message carried;
		// what was admitted since comes out of it. After Close nothing more
		// is admitted, so nothing goes unreported.
		closed := l.closed.Load()
		// A reply that comes back half an allowance's life or more after
		// its message was prepared brings an allowance that prepare would
		// take back at once, and that may have lapsed in Redis meanwhile
		// and gone to others: spend none of it. What the message reported
		// stays counted, and the next message asks afresh. (A client that
		// ignores context deadlines hands such replies over however long
		// the round timeout.)
		stale := l.cfg.overshoot >= 0 && time.Duration(l.nanos(now)-e.sentAt) >= l.allowanceLife()/2
		e.settle(func(consumed int64) int64 {
			if closed || stale {
				return 0
			}
			return allowance - (consumed - e.sent)
		})
		e.grantAt = e.sentAt
		remaining = max(remaining-allowance, 0)
	} else if granted := e.issued - l.debts.owed(e); total > granted {
		// Never less: a message raises a ledger that lost tokens (a
		// failover's lost writes, an expired ledger) to all it was told.
		e.give(total - granted)
	}
	e.partLeft.Store(remaining)
	if e.shards > 1 {
		l.sumParts(e)
	} else {
		e.remaining.Store(remaining)
	}
	e.resetAfter.Store(int64(time.Duration(resetUS) * time.Microsecond))
	e.nextSync = l.nanos(now) + int64(l.nextInterval(e, m.limit))
	if retryUS > 0 {
		// The bucket is empty. Deny locally until a token is due, or, for
		// a limit that is leased out, until the key's next round asks for
		// what refilled meanwhile: every instance polling an empty bucket
		// would cost a fetch per token.
		until := l.nanos(now) + int64(time.Duration(retryUS)*time.Microsecond)
		if !l.lowLimit(e, m.limit) {
			until = max(until, e.nextSync)
		}
		if e.gen > 0 {
			// A part of a layout a reshard made is empty from its opening
			// until the mover credits it what the old parts held, a round
			// trip later, and the old parts' markers send instances to it
			// meanwhile: an "empty" heard then may be stale, so it holds
			// for an interval at most (with a slow refill it would
			// otherwise strand the credit for as long as a token takes).
			until = min(until, max(e.nextSync, l.nanos(now)+int64(l.cfg.interval)))
		}
		e.denyUntil.Store(until)
		e.deniedFor.Store(limitHash(*m.key))
	} else if l.cfg.mode == Optimistic && l.cfg.overshoot >= 0 && allowance == 0 {
		// Tokens are left but other instances hold them all under the
		// budget: nothing comes free before they report, so ask at the
		// next round rather than at every denial (a starved instance sent
		// a round per round trip, 1,868 in 2.5 s in TestLateGrantNotSpent).
		e.denyUntil.Store(e.nextSync)
		e.deniedFor.Store(limitHash(*m.key))
	} else {
		e.denyUntil.Store(0)
	}
}

// nextInterval returns the time until e's next sync: the sync interval,
// jittered, or sooner when the key's allowance will run out before then
// or its global bucket is nearly empty. In Reserve mode a key whose bucket
// cannot feed it (it held less than an interval of this instance's
// demand, or nothing) is rationed: asking sooner only spreads what
// refills thinner over the instances, for more messages.
func (l *Limiter) nextInterval(e *entry, limit hybridlimit.Limit) time.Duration {
	d := l.cfg.interval
	held := float64(max(e.avail.Load(), 0))
	// Reserve holds what it spends, so asking sooner is worth it only while
	// the bucket can answer; Optimistic spends first, and asking sooner is
	// what bounds its overshoot.
	left, optimistic := e.partLeft.Load(), l.cfg.mode == Optimistic
	if e.demand > 0 && (optimistic || float64(left) >= e.demand*l.cfg.interval.Seconds()) {
		if runOut := time.Duration(held / e.demand * float64(time.Second)); runOut < d {
			d = max(runOut/2, l.tick())
		}
	}
	if left < limit.Burst/10 && (optimistic || left > 0) && e.demand > 0 {
		d = max(min(d, l.cfg.interval/2), l.tick())
	}
	return time.Duration(float64(d) * l.jitter(uint64(e.epoch)^uint64(e.acked)))
}

// maxQuiet is the most sync intervals a Reserve entry with nothing to say
// goes without a look (see quietFor); the timing wheel spans 16.
const maxQuiet = 8

// quietFor returns when to look again at e, which holds allowance and had
// nothing to say: in Reserve mode, while its bucket is not low, a quarter
// of the time its demand takes to bring it down to its low mark (for a key
// unused for two intervals, its idle hold's end), if that is at least two
// intervals, up to maxQuiet intervals; else nextInterval. Looking at every
// entry every interval was much of what the rounds of an instance with
// 100,000 quiet keys cost it; a key whose demand jumps meanwhile fetches
// when its allowance runs out, as any key does. The caller holds e.mu.
func (l *Limiter) quietFor(e *entry, limit hybridlimit.Limit, now time.Time) time.Duration {
	d := l.nextInterval(e, limit)
	if l.cfg.mode == Optimistic || e.partLeft.Load() < limit.Burst/10 {
		return d
	}
	var q time.Duration
	switch unused := time.Duration(l.nanos(now) - e.usedAt); {
	case e.demand > 0:
		left := float64(e.avail.Load()) - l.lowMark(e, min(l.lease(e, limit, now), limit.Burst))
		q = time.Duration(left / e.demand / 4 * float64(time.Second))
	case unused >= 2*l.cfg.interval:
		// Unused for a while: the next thing to do is to hand its lease
		// back when the idle hold ends. (A key just fetched has no
		// demand measured yet, and is not quiet.)
		q = l.idleHold() - unused
	}
	if q < 2*l.cfg.interval {
		return d
	}
	return max(d, min(q, maxQuiet*l.cfg.interval))
}

// jitter returns a factor in [1-j, 1+j] for the configured jitter j, drawn
// from x by a SplitMix64 step: deterministic for a deterministic clock, so
// a simulation in virtual time replays exactly.
func (l *Limiter) jitter(x uint64) float64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	u := float64(x>>11) / (1 << 53)
	return 1 + l.cfg.jitter*(2*u-1)
}

// tick is the loop's wake-up period: a quarter of the sync interval.
func (l *Limiter) tick() time.Duration { return max(l.cfg.interval/4, time.Millisecond) }
