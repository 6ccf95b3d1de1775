package sync

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	stdsync "sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/lua"
	"github.com/hybridlimit/hybridlimit/sharding"
)

// Errors a Limiter returns besides the shared ones of package hybridlimit.
var (
	// ErrClosed is returned by decisions after Close.
	ErrClosed = errors.New("sync: limiter closed")
	// ErrTooManyKeys is wrapped when a new key finds the table full and the
	// failure policy cannot decide for it either.
	ErrTooManyKeys = errors.New("sync: too many tracked keys")
)

// Limiter is the hybrid rate limiter: each key's global token bucket lives
// in Redis, and this instance spends allowance from it locally. A decision
// with local allowance is one atomic subtraction: no lock, no allocation, no
// I/O. A background loop reconciles every active key with Redis each sync
// interval through one batched script call per slot group, pipelined per
// node; see Mode for the two ways of reconciling and docs/design.md for the
// protocol and its bounds.
//
// The limit is passed with each decision, so one Limiter serves any number
// of keys and policies; a key names one limit, so use distinct keys for
// distinct policies ("ip:1.2.3.4", "apikey:abc").
//
// New starts nothing. Start (or Run) starts the one background goroutine,
// the sync loop, which Close stops after handing back unused allowance.
// Decisions that find no local allowance fetch more themselves, coalesced
// with every other waiting decision into one batched call, so a Limiter
// works before Start too, only without background refills.
//
// A Limiter is safe for concurrent use.
type Limiter struct {
	rdb  hybridlimit.Redis
	cfg  config
	ks   hybridlimit.Keyspace
	tags []string // hash tag of each slot group
	// perSlot keeps each script call to one slot group: needed on a
	// cluster (WithCallPerSlotGroup forces it elsewhere).
	perSlot bool
	table   *table
	// parts holds the entries of split keys' parts other than this
	// instance's home part, which is in table under the caller's key: a
	// table of their own, so no caller's key can name one.
	parts *table
	// fallback enforces each instance's share while Redis cannot be asked.
	fallback *local.Table
	base     time.Time // the clock reading that nanosecond offsets count from
	seq      atomic.Int64
	live     atomic.Int64       // instances seen alive in Redis, at least 1
	presence string             // key of the presence set
	rounds   singleflight.Group // keeps rounds from overlapping
	wake     chan struct{}      // pokes the loop for an early round

	heat heat // sync messages per key, for automatic sharding
	// unclosed holds the moves whose old parts did not all close, by key,
	// for Reshard to close again; guarded by unclosedMu.
	unclosedMu stdsync.Mutex
	unclosed   map[string]oldParts
	moveMu     stdsync.Mutex // one move to a new layout at a time
	// pending holds the moves waiting for a message in flight, by key;
	// guarded by moveMu.
	pending map[string]layout
	cool    coolness // split keys' cooling, for automatic sharding

	tracked atomic.Int64 // entries in table
	stats   counters
	// retiring makes an entry's retirement (marked dead, out of its
	// table, its admitted count moved to stats.evictedAdmitted) one step
	// to Stats, which holds it for reading while it sums: seen half done,
	// the count was in neither place and Stats.Admitted, a counter, went
	// down. Taken before any entry's mutex.
	retiring stdsync.RWMutex
	nodes    nodes // the masters serving the slot groups, each with its breaker
	debts    debts // of the entries the failure policy admitted for
	// probeKeys holds a key of each slot group that probes of its node write.
	probeKeys    []string
	presenceDown atomic.Bool // the last presence call failed

	flagMu  stdsync.Mutex
	flagged []*entry // entries wanting a sync before their turn

	limits limits // one copy of each limit in use, which entries point to

	sched schedule  // entries by the tick of their next sync
	swept time.Time // when a round last looked for idle entries; rounds never overlap

	life    stdsync.Mutex
	running bool
	looping atomic.Bool // the loop runs (and probes failing nodes)
	closed  atomic.Bool
	stop    chan struct{}
	done    chan struct{}
	// closing admits one Close at a time; closedClean, read and written
	// by its holder, says a Close finished and later ones have nothing
	// to do. closedCh is closed by the first Close, to wake sleeping
	// Waits.
	closing     chan struct{}
	closedClean bool
	closedCh    chan struct{}
}

// New returns a Limiter on rdb. It validates the options and starts nothing.
func New(rdb hybridlimit.Redis, opts ...Option) (*Limiter, error) {
	if err := hybridlimit.CheckClient(rdb); err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("sync: nil option")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	cfg.finish()
	if cfg.roundTimeout < cfg.durable.timeout {
		return nil, fmt.Errorf("sync: round timeout %v is shorter than the durable-sync WAIT timeout %v: a round would end before its replicas could answer", cfg.roundTimeout, cfg.durable.timeout)
	}
	if (cfg.shards != nil || cfg.auto.Max > 0) && cfg.mode == Optimistic {
		return nil, errors.New("sync: WithShards and WithAutoShards need Reserve mode")
	}
	if cfg.instanceID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.instanceID = hex.EncodeToString(b[:])
	}
	ks, err := hybridlimit.NewKeyspace(cfg.prefix)
	if err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	fb, err := local.NewTable(local.WithMaxKeys(cfg.maxKeys))
	if err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	l := &Limiter{
		rdb:      rdb,
		cfg:      cfg,
		ks:       ks,
		tags:     groupTags(cfg.groups),
		perSlot:  cfg.perSlot || isCluster(rdb),
		table:    newTable(),
		parts:    newTable(),
		fallback: fb,
		base:     cfg.clock.Now(),
		presence: ks.Tagged("presence", "instances"),
		wake:     make(chan struct{}, 1),
		closing:  make(chan struct{}, 1),
		closedCh: make(chan struct{}),
	}
	l.stats.deniedRemote, l.stats.deniedLocal = xsync.NewCounter(), xsync.NewCounter()
	// Sequence numbers start at the clock in microseconds, so a restarted
	// instance that keeps its id still numbers above its past.
	l.seq.Store(cfg.clock.Now().UnixMicro())
	l.live.Store(1)
	l.sched.tick = int64(l.tick())
	l.nodes.init(cfg.groups, nodeName(rdb), cfg.logger, cfg.interval)
	l.probeKeys = make([]string, cfg.groups)
	for g, tag := range l.tags {
		l.probeKeys[g] = ks.Tagged(tag, "probe")
	}
	return l, nil
}

// isCluster reports whether rdb is a cluster client, whose script calls
// must each stay within one hash slot.
func isCluster(rdb hybridlimit.Redis) bool {
	_, ok := rdb.(masterForKey)
	return ok
}

// groupTags returns one hash tag per slot group, chosen so that group g's
// tag hashes into the g-th of n equal slot ranges. Masters own contiguous
// slot ranges, so the groups spread evenly over any cluster.
func groupTags(n int) []string {
	tags := make([]string, n)
	for g := range tags {
		lo, hi := g*hybridlimit.SlotCount/n, (g+1)*hybridlimit.SlotCount/n
		for i := 0; ; i++ {
			tag := fmt.Sprintf("s%d.%d", g, i)
			if s := hybridlimit.Slot(tag); s >= lo && s < hi {
				tags[g] = tag
				break
			}
		}
	}
	return tags
}

// group returns the slot group of a key: a hash every instance computes alike.
func (l *Limiter) group(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(len(l.tags)))
}

// Keys returns the Redis keys of key's global bucket, a hash that also
// holds every instance's ledger (field "l:" + instance id), and of its Optimistic
// allowances, for inspection and tests.
func (l *Limiter) Keys(key string) (bucket, allowances string) {
	return l.PartKeys(key, 0, 1, 0)
}

// PartKeys is Keys for part j of a key split s ways, in the given
// generation of its layout (0 for the configured one, WithShards; more
// after automatic resharding, WithAutoShards). Part j lives in the slot
// group sharding.Group assigns it, and its key names carry "#j.s" (and
// ".gen" after the first generation) after the kind, so whole keys and the
// parts of every layout never share a name. Values that name no part (s
// outside [1, sharding.MaxShards], j outside [0, s), a negative
// generation) return two empty names.
func (l *Limiter) PartKeys(key string, j, s, generation int) (bucket, allowances string) {
	if sharding.CheckShards(s) != nil || j < 0 || j >= s || generation < 0 {
		return "", ""
	}
	return l.partKeys(key, j, layout{s, generation})
}

// Layout returns how this instance knows key to be split: into shards
// parts, of the given layout generation; 1, 0 for a whole key or one it
// does not track.
func (l *Limiter) Layout(key string) (shards, generation int) {
	if e := l.table.get(key); e != nil && !e.dead.Load() {
		return int(e.shards), int(e.gen)
	}
	return 1, 0
}

// partKeys names the keys of part j of key in layout at; a generation
// after the first adds ".gen" to the part's suffix.
func (l *Limiter) partKeys(key string, j int, at layout) (bucket, allowances string) {
	b, ends := l.appendPartKeys(nil, key, j, at, l.partGroup(key, j, at.shards))
	names := string(b)
	return names[:ends[0]], names[ends[0]:ends[1]]
}

// appendPartKeys appends to dst the names partKeys returns, for the part
// whose slot group is g, end to end, and returns where each ends. A round
// names the keys of its messages this way, into one buffer a call, rather
// than each entry keeping its own strings.
func (l *Limiter) appendPartKeys(dst []byte, key string, j int, at layout, g int) ([]byte, [lua.SyncKeys]int) {
	var ends [lua.SyncKeys]int
	for i, kind := range [lua.SyncKeys]byte{'h', 'a'} {
		dst = l.ks.AppendTagged(dst, l.tags[g])
		dst = append(dst, kind)
		if at.shards > 1 || at.gen > 0 {
			dst = append(dst, '#')
			dst = strconv.AppendInt(dst, int64(j), 10)
			dst = append(dst, '.')
			dst = strconv.AppendInt(dst, int64(at.shards), 10)
			if at.gen > 0 {
				dst = append(dst, '.')
				dst = strconv.AppendInt(dst, int64(at.gen), 10)
			}
		}
		dst = append(dst, ':')
		dst = append(dst, key...)
		ends[i] = len(dst)
	}
	return dst, ends
}

// shardCount returns how many parts key is split into under limit: what
// WithShards says, as far as the limit splits (sharding.Fit).
func (l *Limiter) shardCount(key string, limit hybridlimit.Limit) (int, error) {
	if l.cfg.shards == nil {
		return 1, nil
	}
	s := l.cfg.shards(key, limit)
	if err := sharding.CheckShards(s); err != nil {
		return 0, fmt.Errorf("sync: key %q: %w", key, err)
	}
	return sharding.Fit(limit, s), nil
}

// partGroup returns the slot group of part j of s of key.
func (l *Limiter) partGroup(key string, j, s int) int {
	if s == 1 {
		return l.group(key)
	}
	return sharding.Group(l.group(key), j, s, len(l.tags))
}

// partLimit returns the limit e's part enforces.
func partLimit(e *entry) hybridlimit.Limit {
	return partOf(*e.limit.Load(), int(e.shard), int(e.shards))
}

// partName is the name of part j of key in layout at in the parts table.
func partName(key string, j int, at layout) string {
	return strconv.Itoa(j) + "." + strconv.Itoa(at.shards) + "." + strconv.Itoa(at.gen) + ":" + key
}

// InstanceID returns the name of this instance in Redis.
func (l *Limiter) InstanceID() string { return l.cfg.instanceID }

// Mode returns the reconcile mode.
func (l *Limiter) Mode() Mode { return l.cfg.mode }

// Peek reports key's state under limit as this instance knows it, without
// spending and without asking Redis: Remaining is the allowance it holds
// plus what the key's global bucket held at its last sync (as decisions
// report it), Allowed whether a request of cost 1 would find a token by
// that reckoning, RetryAfter how long Redis said the bucket stays empty.
// A key the instance does not track reads as full, as an absent bucket
// does in Redis. It is for reporting, such as the quota in the headers of
// a request refused unasked (httplimit, a cost above the burst), not for
// deciding: other instances may have spent since.
func (l *Limiter) Peek(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	if err := ctx.Err(); err != nil {
		return hybridlimit.Result{}, err
	}
	if l.closed.Load() {
		return hybridlimit.Result{}, ErrClosed
	}
	if err := limit.Validate(); err != nil {
		return hybridlimit.Result{}, fmt.Errorf("sync: %w", err)
	}
	if err := hybridlimit.CheckKey(key); err != nil {
		return hybridlimit.Result{}, fmt.Errorf("sync: %w", err)
	}
	r := hybridlimit.Result{Limit: limit, Source: hybridlimit.SourceLocal}
	e := l.table.get(key)
	if e == nil || e.dead.Load() || !e.denialHolds(limit) {
		// Untracked, or known only under a tighter limit: as an absent
		// bucket reads, full.
		r.Allowed, r.Remaining = true, limit.Burst
		return r, nil
	}
	held := e.held()
	r.Remaining = min(held+e.remaining.Load(), limit.Burst)
	r.ResetAfter = time.Duration(e.resetAfter.Load())
	left := time.Duration(e.denyUntil.Load() - l.nanos(l.cfg.clock.Now()))
	switch {
	case held >= 1:
		r.Allowed = true
	case left > 0:
		r.RetryAfter = left
	case r.Remaining >= 1:
		r.Allowed = true
	default:
		r.RetryAfter = l.cfg.interval // the next round may bring tokens
	}
	return r, nil
}

// Refund gives back cost that decisions on key under limit admitted, for
// a request that did not go ahead (another rule of the request denied it,
// say): the instance may spend it again, and in Reserve mode hands it back
// to Redis at its next round if the key does not need it; in Optimistic
// mode it is not reported, or, if it was, the next reports are that much
// smaller. At most what this instance's entries for key admitted is given
// back; for a key it no longer tracks nothing is (Redis keeps counting the
// cost as spent: an undershoot, never an overshoot). Stats.Admitted counts
// the refunded cost as admitted all the same, Stats.Refunded counts it.
// Errors: an invalid limit, cost or key, ErrClosed, ctx.Err().
func (l *Limiter) Refund(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.closed.Load() {
		return ErrClosed
	}
	if err := limit.Validate(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := limit.CheckCost(cost); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := hybridlimit.CheckKey(key); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	home := l.table.get(key)
	if home == nil || home.dead.Load() {
		return nil
	}
	// Home first, then the other parts of a split key, each given back at
	// most what it admitted.
	at := home.layout()
	for j := 0; j < at.shards && cost > 0; j++ {
		e := home
		if j != int(home.shard) {
			if e = l.parts.get(partName(key, j, at)); e == nil {
				continue
			}
		}
		l.lock(e)
		if n := min(cost, e.consumed()); n > 0 && !e.dead.Load() {
			e.deposit(n)
			cost -= n
			l.stats.refunded.Add(uint64(n))
		}
		l.unlock(e)
	}
	return nil
}

// Reset forgets key, as an operator does to unblock a client: the key's
// global bucket reads as full again, and every instance forgets what it
// holds of it and what its failure policy admitted for it at its next
// message about the key (within a sync interval for a key in use), this
// instance at once. For a key split into parts, the parts of the layout
// this instance tracks the key in are reset, and of the layout the
// configuration (WithShards) gives it under the limit it was last asked
// with; an instance that does not track the key resets the whole key's
// bucket only, so reset a split key from an instance that uses it. A
// part a reshard has closed is left as it is: it names where the key went.
// Errors: an invalid key, ErrClosed, ctx.Err(), and an error wrapping
// hybridlimit.ErrUnavailable when Redis could not be asked (nothing is
// forgotten then).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.closed.Load() {
		return ErrClosed
	}
	if err := hybridlimit.CheckKey(key); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	layouts := []layout{{shards: 1}}
	home := l.table.get(key)
	if home != nil && !home.dead.Load() {
		layouts = append(layouts, home.layout())
		if s, err := l.shardCount(key, *home.limit.Load()); err == nil {
			layouts = append(layouts, layout{shards: s})
		}
	}
	slices.SortFunc(layouts, func(a, b layout) int { return cmp.Or(cmp.Compare(a.shards, b.shards), cmp.Compare(a.gen, b.gen)) })
	for _, at := range slices.Compact(layouts) {
		for j := range at.shards {
			bucket, allowances := l.partKeys(key, j, at)
			if _, err := lua.SyncReset.Run(ctx, l.rdb, []string{bucket, allowances}, 0, l.ledgerTTL()); err != nil {
				l.stats.countError(err)
				return fmt.Errorf("sync: reset %q: %w: %w", key, hybridlimit.ErrUnavailable, err)
			}
		}
	}
	// This instance forgets at once: the next decision starts afresh.
	if home != nil {
		at := home.layout()
		for j := range at.shards {
			if j == int(home.shard) {
				l.drop(l.table, home)
			} else if p := l.parts.get(partName(key, j, at)); p != nil {
				l.drop(l.parts, p)
			}
		}
	}
	return nil
}

// Allow is AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	return l.AllowNAt(ctx, time.Time{}, key, limit, 1)
}

// AllowN reports whether a request of the given cost may happen now, and
// spends the cost if so. See AllowNAt.
func (l *Limiter) AllowN(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	return l.AllowNAt(ctx, time.Time{}, key, limit, cost)
}

// ErrWouldExceedDeadline is returned by Wait when the wait the limiter
// asks for ends after ctx's deadline: failing at once beats failing late.
var ErrWouldExceedDeadline = errors.New("sync: wait would exceed the context deadline")

// Wait is WaitN(ctx, key, limit, 1).
func (l *Limiter) Wait(ctx context.Context, key string, limit hybridlimit.Limit) error {
	return l.WaitN(ctx, key, limit, 1)
}

// WaitN blocks until a request of the given cost is admitted, sleeping for
// each denial's RetryAfter, and returns nil once it is. It returns
// ErrWouldExceedDeadline at once if a RetryAfter ends past ctx's deadline,
// ctx.Err() if ctx ends first, ErrClosed if the limiter closes while it
// sleeps, and any error AllowN returns.
func (l *Limiter) WaitN(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) error {
	for {
		r, err := l.AllowN(ctx, key, limit, cost)
		if err != nil {
			return err
		}
		if r.Allowed {
			return nil
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < r.RetryAfter {
			return ErrWouldExceedDeadline
		}
		t := time.NewTimer(r.RetryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-l.closedCh:
			t.Stop()
			return ErrClosed
		case <-t.C:
		}
	}
}

// AllowNAt is AllowN at time now; the zero time means the limiter's clock.
// The time matters only when the key has no local allowance left.
//
// With allowance, the decision is local and immediate. Without, in Reserve
// mode it asks Redis for more, waiting at most the max wait and ctx; in
// Optimistic mode it is denied until the next round. While Redis cannot be
// asked, the failure policy decides. Remaining and ResetAfter of an
// admitted Result are as of this instance's last sync with Redis.
//
// Result.Source says which: SourceGlobal if the decision waited for a
// fetch that Redis answered, SourceFallback if the failure policy decided,
// else SourceLocal (spent from allowance, or denied from what this
// instance knows). Setting it costs the fast path nothing: it is a
// constant in the returned struct.
//
// Errors: an invalid limit, cost or key (wrapping the sentinels of package
// hybridlimit), ErrClosed after Close, and ctx.Err() if ctx ends while the
// decision waits. Redis failures never surface as errors: the failure
// policy turns them into decisions, counted in Stats.
func (l *Limiter) AllowNAt(ctx context.Context, now time.Time, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	if e := l.table.get(key); e != nil && *e.limit.Load() == limit && cost > 0 && cost <= e.maxCost(limit) {
		if n := e.spend(cost); n >= 0 {
			return hybridlimit.Result{
				Limit:      limit,
				Allowed:    true,
				Source:     hybridlimit.SourceLocal,
				Remaining:  min(n+e.remaining.Load(), limit.Burst),
				ResetAfter: time.Duration(e.resetAfter.Load()),
			}, nil
		}
		if e.denyUntil.Load() != 0 {
			if r, ok := l.stillEmpty(e, now, limit, cost); ok {
				return r, nil
			}
		}
	}
	return l.slow(ctx, now, key, limit, cost)
}

// stillEmpty denies a decision on a key whose bucket Redis reported empty
// until a time not yet come, as the slow path would, without its checks
// and second lookup: a key at its limit is most of what a busy limiter
// decides. It leaves to the slow path a closed limiter, a stale or split
// entry, a cost the limit cannot pay, and one the allowance pays spread
// over per-CPU counters but no counter alone (the slow path gathers it).
func (l *Limiter) stillEmpty(e *entry, now time.Time, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, bool) {
	if e.shards != 1 || e.dead.Load() || cost > limit.Burst || l.closed.Load() || e.fragmented(cost) {
		return hybridlimit.Result{}, false
	}
	now = l.at(now)
	left := e.denyUntil.Load() - l.nanos(now)
	if left <= 0 {
		return hybridlimit.Result{}, false
	}
	l.stats.deniedRemote.Inc()
	return denied(limit, time.Duration(left), hybridlimit.SourceLocal), true
}
