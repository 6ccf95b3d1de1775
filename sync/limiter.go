package sync

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	stdsync "sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/sync/internal/account"
)

// ErrClosed is returned by decisions after Close.
var ErrClosed = errors.New("sync: limiter closed")

// errTooManyKeys is why a new key finding the table full goes to the
// failure policy.
var errTooManyKeys = errors.New("sync: too many tracked keys")

// Limiter is the hybrid rate limiter: each key's global token bucket lives
// in Redis, and this instance spends allowance from it locally, a decision
// with allowance being one atomic subtraction (no lock, no allocation, no
// I/O). A background loop reconciles the active keys every sync interval in
// batched script calls (see Mode, and docs/design.md for the protocol and
// its bounds). The limit comes with each decision, so one Limiter serves any
// number of keys and limits; give distinct limits distinct keys.
//
// New starts nothing; Start starts the loop, and Close stops it after
// handing back unused allowance. Decisions out of allowance fetch it
// themselves, so a Limiter works before Start too, without refills ahead
// of demand. A Limiter is safe for concurrent use.
type Limiter struct {
	rdb   hybridlimit.Redis
	cfg   config
	pol   account.Policy
	mode  account.Mode // Reserve's or Optimistic's part of a round
	tr    transport
	ks    hybridlimit.Keyspace
	tags  []string // hash tag of each slot group
	table *table
	// parts holds the entries of split keys' parts other than this
	// instance's home part, which is in table under the caller's key: a
	// table of their own, so no caller's key can name one.
	parts *table
	// fallback enforces each instance's share while Redis cannot be asked.
	fallback *local.Table
	base     time.Time // the clock reading that nanosecond offsets count from
	seq      atomic.Int64
	live     atomic.Int64 // instances seen alive in Redis, at least 1
	presence string       // key of the presence set
	resetLog string       // key of the reset log, on the presence set's node
	// resetsRead is the script time of the last presence call's read of the
	// reset log (microseconds), the next read's since; 0 before the first.
	resetsRead atomic.Int64
	rounds     singleflight.Group // keeps rounds from overlapping
	wake       chan struct{}      // pokes the loop for an early round

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
	owing    owing // what entries owe Redis: the failure policy's admissions, charges
	// probeKeys holds a key of each slot group that probes of its node write.
	probeKeys    []string
	presenceDown atomic.Bool // the last presence call failed

	flagMu  stdsync.Mutex
	flagged []*entry // entries wanting a sync before their turn
	riders  []*entry // entries under their ride marks, for the next call to their nodes (spent)
	serial  uint64   // the serial of the last round that took the flagged entries
	// finished tells decisions when the round they wait for is over;
	// fetcher says a goroutine of fetchAlone runs the rounds they wait
	// for (fetches: Close waits for it).
	finished finished
	fetcher  atomic.Bool
	fetches  stdsync.WaitGroup

	limits limits // one copy of each limit in use, which entries point to

	sched schedule  // entries by the tick of their next sync
	swept time.Time // when a round last looked for idle entries; rounds never overlap

	life    stdsync.Mutex
	running bool
	driver  Driver      // steps the loop, when the clock is one (the simulator)
	looping atomic.Bool // the loop runs (and probes failing nodes)
	chores  chores      // the loop's, when last done
	probes  stdsync.WaitGroup
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

// New returns a Limiter on rdb. It checks the options and starts nothing.
func New(rdb hybridlimit.Redis, opts ...Option) (*Limiter, error) {
	if err := hybridlimit.CheckClient(rdb); err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
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
		pol:      cfg.leasePolicy(),
		ks:       ks,
		tags:     groupTags(cfg.groups),
		table:    newTable(),
		parts:    newTable(),
		fallback: fb,
		base:     cfg.clock.Now(),
		presence: ks.Tagged("presence", "instances"),
		resetLog: ks.Tagged("presence", "resets"),
		wake:     make(chan struct{}, 1),
		closing:  make(chan struct{}, 1),
		closedCh: make(chan struct{}),
	}
	l.stats.deniedRemote, l.stats.deniedLocal, l.stats.deniedDebt = xsync.NewCounter(), xsync.NewCounter(), xsync.NewCounter()
	l.mode = account.Reserve{Policy: l.pol}
	if cfg.mode == Optimistic {
		l.mode = account.Optimistic{Policy: l.pol, Budget: cfg.overshoot, Life: l.allowanceLife()}
	}
	l.tr = l.transport()
	// Sequence numbers start at the clock in microseconds, so a restarted
	// instance that keeps its id still numbers above its past.
	l.seq.Store(cfg.clock.Now().UnixMicro())
	l.live.Store(1)
	l.sched.init(int64(l.pol.Tick()))
	l.nodes.init(cfg.groups, nodeName(rdb), cfg.logger, cfg.interval)
	l.probeKeys = make([]string, cfg.groups)
	for g, tag := range l.tags {
		l.probeKeys[g] = ks.Tagged(tag, "probe")
	}
	if d, ok := cfg.clock.(Driver); ok {
		l.driver = d
		l.looping.Store(true)
		d.Drive(driven{l})
	}
	return l, nil
}

// transport returns the limiter's transport, its calls' header fixed.
func (l *Limiter) transport() transport {
	script := scripts.Sync
	var refresh func(context.Context) // nodes need no map off a cluster
	if isCluster(l.rdb) {
		script = scripts.SyncCluster
		refresh = func(ctx context.Context) { l.refreshNodes(ctx, l.cfg.clock.Now()) }
	}
	return transport{
		rdb:    l.rdb,
		script: script,
		header: scripts.SyncHeader{
			LedgerTTLMS: l.ledgerTTL(), Mode: l.mode.Wire(), Instance: l.cfg.instanceID,
			AllowanceLifeUS: l.allowanceLife().Microseconds(),
		}.Args(),
		keyArgs: l.mode.Wire().KeyArgs(),
		maxKeys: l.cfg.maxKeysPerCall,
		durable: l.cfg.durable,
		name: func(dst []byte, m *message) ([]byte, [2]int) {
			return l.appendKeysOf(dst, m.e, m.group)
		},
		nodes:   &l.nodes,
		refresh: refresh,
		stats:   &l.stats,
		clock:   l.cfg.clock,
	}
}

// isCluster reports whether rdb is a cluster client, whose script calls
// must each stay with one node.
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

// InstanceID returns the name of this instance in Redis.
func (l *Limiter) InstanceID() string { return l.cfg.instanceID }

// Mode returns the reconcile mode.
func (l *Limiter) Mode() Mode { return l.cfg.mode }

// Peek reports key's state under limit as this instance knows it, without
// spending or asking Redis: the allowance it holds plus what the bucket
// held at its last sync, and the time until it is full by that sync and
// the refill since (a key it does not track reads as full). For reporting,
// such as the headers of a request refused unasked, not for deciding:
// other instances may have spent since.
func (l *Limiter) Peek(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	if err := ctx.Err(); err != nil {
		return hybridlimit.Result{}, err
	}
	if err := l.checkCall(key, limit, 1); err != nil {
		return hybridlimit.Result{}, err
	}
	r := hybridlimit.Result{Limit: limit, Source: hybridlimit.SourceLocal}
	e := l.table.get(key)
	if e == nil || e.isDead() || !e.denialHolds(limit) {
		// Untracked, or known only under a tighter limit: as an absent
		// bucket reads, full.
		r.Allowed, r.Remaining = true, limit.Burst
		return r, nil
	}
	held := e.held()
	now := l.nanos(l.cfg.clock.Now())
	r.Remaining = min(held+e.remaining.Load(), limit.Burst)
	r.ResetAfter = time.Duration(max(e.heardAt.Load()+e.resetAfter.Load()-now, 0))
	left := time.Duration(e.denyUntil.Load() - now)
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

// Refund gives back cost that decisions on key under limit admitted, for a
// request that did not go ahead: this instance may spend it again, and
// Redis gets it back (Reserve) or is not told of it (Optimistic). At most
// what this instance admitted for the key is given back, nothing for a key
// it no longer tracks (an undershoot, never an overshoot). Stats counts it
// in Refunded, and in Admitted still.
func (l *Limiter) Refund(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.checkCall(key, limit, cost); err != nil {
		return err
	}
	home := l.table.get(key)
	if home == nil || home.isDead() {
		return nil
	}
	// Home first, then the other parts of a split key, each given back at
	// most what it admitted.
	for _, e := range l.layoutEntries(home) {
		if cost == 0 {
			break
		}
		l.lockGather(e)
		if n := min(cost, e.consumed()); n > 0 && !e.isDead() {
			e.avail.Deposit(n)
			cost -= n
			l.stats.refunded.Add(uint64(n))
		}
		l.scatterUnlock(e)
	}
	return nil
}

// Reset forgets key: its bucket reads as full again, and every instance
// forgets what it holds or owes for it at its next message about the key,
// which finds its ledger gone. This instance sends that message before
// Reset returns (unless ctx or the round timeout ends first: the loop
// sends it then); every other instance within a sync interval, as it
// hears of the reset at its next presence call. For a split key, the parts
// of the layouts this instance knows it in are reset: reset a split key
// from an instance that uses it. It fails with an error wrapping
// hybridlimit.ErrUnavailable when Redis cannot be asked: forgetting
// nothing if no bucket could be reset, and with the buckets reset but the
// other instances told only at their next message if the reset log could
// not be written.
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
	home := l.table.get(key)
	for _, keys := range l.knownParts(key, home) {
		if _, err := scripts.SyncReset.Run(ctx, l.rdb, keys[:], 0, l.ledgerTTL()); err != nil {
			l.stats.countError(err)
			return fmt.Errorf("sync: reset %q: %w: %w", key, hybridlimit.ErrUnavailable, err)
		}
	}
	// This instance hears of the reset as the others do, only at once.
	// Redis, not this instance, tells an entry's grants from before the
	// reset from those after it: a message already on its way when the
	// bucket was reset may have been granted from the full bucket, and an
	// entry dropped here would lose that grant.
	serial := uint64(0)
	l.eachPart(home, func(e *entry) { serial = max(serial, l.resync(e, false)) })
	// After the buckets: an instance that heard of the reset earlier could
	// ask the old bucket again, and remember its denial.
	if _, err := scripts.ResetLog.Run(ctx, l.rdb, []string{l.resetLog}, 0, key, l.ledgerTTL()); err != nil {
		l.stats.countError(err)
		return fmt.Errorf("sync: reset %q: the buckets are reset, but other instances hear of it only at their next message: %w: %w", key, hybridlimit.ErrUnavailable, err)
	}
	if serial > 0 {
		// A round that does not answer in time leaves the messages to
		// the loop's next.
		_ = l.fetch(ctx, serial, l.cfg.clock.Now().Add(l.cfg.roundTimeout))
	}
	return nil
}

// Allow is AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	return l.AllowNAt(ctx, time.Time{}, key, limit, 1)
}

// AllowN is AllowNAt at the limiter's clock's time.
func (l *Limiter) AllowN(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	return l.AllowNAt(ctx, time.Time{}, key, limit, cost)
}

// ErrWouldExceedDeadline is what Wait returns at once when the wait it
// would need ends past ctx's deadline.
var ErrWouldExceedDeadline = errors.New("sync: wait would exceed the context deadline")

// Wait is WaitN(ctx, key, limit, 1).
func (l *Limiter) Wait(ctx context.Context, key string, limit hybridlimit.Limit) error {
	return l.WaitN(ctx, key, limit, 1)
}

// WaitN blocks until a request of the given cost is admitted, sleeping on
// the limiter's clock for each denial's RetryAfter. It returns
// ErrWouldExceedDeadline, ctx.Err(), ErrClosed, or AllowN's error.
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
		slept, stop := after(l.cfg.clock, r.RetryAfter)
		select {
		case <-ctx.Done():
			stop()
			return ctx.Err()
		case <-l.closedCh:
			stop()
			return ErrClosed
		case <-slept:
		}
	}
}

// AllowNAt reports whether a request of the given cost may happen at now
// (the zero time: the limiter's clock), and spends the cost if so. With
// local allowance it decides at once. Without, in Reserve mode it asks
// Redis, waiting at most the max wait and ctx; in Optimistic mode a synced
// key is denied until the next round. While Redis cannot be asked the
// failure policy decides. Result.Source says which (SourceLocal,
// SourceGlobal, SourceFallback); Remaining and ResetAfter are as of the
// last sync. Errors: an invalid limit, cost or key (the sentinels of
// package hybridlimit), ErrClosed, ctx.Err(); Redis's failures are never
// errors, but decisions of the failure policy, counted in Stats.
func (l *Limiter) AllowNAt(ctx context.Context, now time.Time, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	if e := l.table.get(key); e != nil && *e.limit.Load() == limit && cost > 0 && cost <= e.maxCost(limit) {
		if n := e.spend(cost); n >= 0 {
			l.spent(e, n, cost)
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
	if !e.whole() || e.isDead() || cost > limit.Burst || l.closed.Load() || e.fragmented(cost) {
		return hybridlimit.Result{}, false
	}
	t := l.nanos(l.at(now))
	if e.denyUntil.Load() <= t {
		return hybridlimit.Result{}, false
	}
	l.stats.denied(l.stats.deniedRemote, e, t)
	retry := l.retryAfter(e, cost, t)
	return deniedUntil(limit, retry, e.fullIn(limit, retry), hybridlimit.SourceLocal), true
}

// allowanceLife is how long an Optimistic allowance counts in Redis against
// the other instances' allowances. The instance renews it at a fifth of its
// life and stops spending it at half its life (account.Optimistic.Lapse),
// so what it spent is reported before the allowance stops counting unless
// its reports fail for some five intervals; a crashed instance's allowance
// holds others back for at most this long.
func (l *Limiter) allowanceLife() time.Duration {
	return 10*l.cfg.interval + l.cfg.roundTimeout
}
