package sharding

import (
	"context"
	"errors"
	"fmt"
	stdsync "sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
)

// Layout says how Global spreads a key over its parts.
type Layout int

const (
	// Suffix splits the limit over the parts (Part for the token
	// algorithms, Quota for the window ones); each request spends
	// from one part, chosen round-robin, and falls over to the next when
	// that one is dry. Works with every algorithm.
	Suffix Layout = iota + 1
	// Time gives each window of a FixedWindow limit to one part, the
	// window's index modulo the shard count, with the whole limit: a
	// window's requests all meet one counter, so decisions stay exact,
	// and consecutive windows load consecutive slots. Time comes from the
	// Global's clock, which every caller of a key must share.
	Time
)

func (l Layout) String() string {
	switch l {
	case Suffix:
		return "suffix"
	case Time:
		return "time"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// Global is an exact limiter (package global) whose keys may be split over
// several hash slots. The shard count of each key comes from a function
// the caller gives, the same in every process: 1 leaves a key whole, in
// the very keys a plain global.Limiter with the same prefix uses (decided
// at the layout's clock in the Time layout, as its parts are). A key's
// parts live under their own hash tags (Place), so changing a key's shard
// count starts its parts afresh, as a new key would.
//
// In the Suffix layout a request of cost c can be admitted only by a part
// whose burst holds c, so c may be at most the smallest part's burst. A
// part that denied is remembered until its retry time, or for a second at
// most, and skipped, so a key at its limit costs no Redis call meanwhile,
// rather than one per part on every request.
// Result.Remaining of an admitted request is what its part has left, a
// lower bound of the key's; Peek sums all parts.
//
// Refund gives back to the part that last admitted on the key, and what
// that part has no room for to the next ones; Reset forgets the key whole
// and every part of every layout it may have had.
//
// A Global is safe for concurrent use and starts no goroutines.
type Global struct {
	rdb     hybridlimit.Redis
	whole   *global.Limiter // keys of shard count 1
	parts   *global.Limiter // the parts of split keys, under their own prefix
	alg     global.Algorithm
	layout  Layout
	shards  func(key string, limit hybridlimit.Limit) int
	clock   func() time.Time
	split   func(limit hybridlimit.Limit, j, s int) hybridlimit.Limit // Part or Quota
	next    atomic.Uint64
	denials denials
	admits  admits
}

// GlobalOption configures NewGlobal.
type GlobalOption func(*globalConfig) error

type globalConfig struct {
	prefix string
	clock  func() time.Time
}

// WithPrefix sets the key prefix, as global.WithPrefix: the whole keys use
// prefix, the parts prefix + "sh:" (Suffix) or prefix + "st:" (Time).
// Example: WithPrefix("api:").
func WithPrefix(prefix string) GlobalOption {
	return func(c *globalConfig) error { c.prefix = prefix; return nil }
}

// WithClock sets the clock of the Time layout, which every caller of a key
// must share; the default is time.Now. Remembered denials of the Suffix
// layout always count on the monotonic clock, since Redis decides those
// parts by its own time. Example: WithClock(func() time.Time { return fake.Now() }).
func WithClock(now func() time.Time) GlobalOption {
	return func(c *globalConfig) error {
		if now == nil {
			return errors.New("sharding: nil clock")
		}
		c.clock = now
		return nil
	}
}

// Fixed returns a shard-count function that splits every key s ways, as
// far as its limit allows (Fit).
func Fixed(s int) func(string, hybridlimit.Limit) int {
	return func(string, hybridlimit.Limit) int { return s }
}

// NewGlobal returns a Global running alg on rdb with the given layout;
// shards gives each key's shard count (see Fixed), and must return the
// same for a key in every process.
func NewGlobal(rdb hybridlimit.Redis, alg global.Algorithm, layout Layout, shards func(key string, limit hybridlimit.Limit) int, opts ...GlobalOption) (*Global, error) {
	if shards == nil {
		return nil, errors.New("sharding: nil shard-count function")
	}
	switch layout {
	case Suffix:
	case Time:
		if alg != global.FixedWindow {
			return nil, fmt.Errorf("sharding: the time layout needs %s, not %s", global.FixedWindow, alg)
		}
	default:
		return nil, fmt.Errorf("sharding: unknown layout %d", int(layout))
	}
	cfg := globalConfig{prefix: hybridlimit.DefaultPrefix, clock: time.Now}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("sharding: nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	whole, err := global.New(rdb, alg, global.WithPrefix(cfg.prefix))
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	sub := "sh:"
	if layout == Time {
		sub = "st:"
	}
	parts, err := global.New(rdb, alg, global.WithPrefix(cfg.prefix+sub))
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	split := Part
	if alg != global.TokenBucket && alg != global.GCRA {
		split = Quota // a window's Period is its length: divide only what it admits
	}
	return &Global{rdb: rdb, whole: whole, parts: parts, alg: alg, layout: layout, shards: shards, split: split, clock: cfg.clock}, nil
}

// Algorithm returns the algorithm every part decides by.
func (g *Global) Algorithm() global.Algorithm { return g.alg }

// Traits says what the Global is: an exact limiter of its algorithm's
// shape. A nil or zero Global, which cannot decide, says nothing.
func (g *Global) Traits() hybridlimit.Traits {
	if g == nil {
		return hybridlimit.Traits{}
	}
	return g.alg.Traits()
}

// Shards returns the shard count key gets under limit: the configured one,
// fitted to the limit, and 1 for an invalid configuration (reported as an
// error by AllowN).
func (g *Global) Shards(key string, limit hybridlimit.Limit) int {
	s, err := g.count(key, limit)
	if err != nil {
		return 1
	}
	return s
}

func (g *Global) count(key string, limit hybridlimit.Limit) (int, error) {
	if g == nil || g.whole == nil || g.shards == nil {
		// A Global not made by NewGlobal, as global.Limiter's zero value.
		return 0, fmt.Errorf("sharding: %w", hybridlimit.ErrNilClient)
	}
	if err := limit.Validate(); err != nil {
		return 0, fmt.Errorf("sharding: %w", err)
	}
	s := g.shards(key, limit)
	if err := CheckShards(s); err != nil {
		return 0, err
	}
	if g.layout == Time {
		return s, nil
	}
	return fit(limit, s, g.split), nil
}

// MaxSplitKeyLen is the longest key Global takes once it is split: each
// part is named by the key plus a suffix of at most 14 bytes (Place), and a
// part's name must itself be a valid key (hybridlimit.MaxKeyLen).
const MaxSplitKeyLen = hybridlimit.MaxKeyLen - 16

// checkSplitKey is hybridlimit.CheckKey for a key about to be split.
func checkSplitKey(key string) error {
	if err := hybridlimit.CheckKey(key); err != nil {
		return fmt.Errorf("sharding: %w", err)
	}
	if len(key) > MaxSplitKeyLen {
		return fmt.Errorf("sharding: %w: key is %d bytes, more than %d, the most a split key may have (its parts add a suffix)",
			hybridlimit.ErrInvalidKey, len(key), MaxSplitKeyLen)
	}
	return nil
}

// PartKey returns the key under which part j of s of key lives in the
// parts' keyspace, for inspection and tests: a key whose escaped form hashes
// into the j-th slice of the slot range (Place).
func PartKey(key string, j, s int) string {
	// Escaping commutes with appending the digits and dots of Place, so
	// the global limiter's escaping of this key yields Place's tag.
	placed := Place(hybridlimit.Escape(key), j, s)
	return key + placed[len(hybridlimit.Escape(key)):]
}

// Allow is AllowN(ctx, key, limit, 1).
func (g *Global) Allow(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	return g.AllowN(ctx, key, limit, 1)
}

// AllowN decides a request of the given cost on key, as global.Limiter's
// AllowN, spending from one part of a split key.
func (g *Global) AllowN(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) (hybridlimit.Result, error) {
	s, err := g.count(key, limit)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	if s == 1 && g.layout == Time {
		return g.whole.AllowAt(ctx, g.clock(), key, limit, cost)
	}
	if s == 1 {
		return g.whole.AllowN(ctx, key, limit, cost)
	}
	if err := checkSplitKey(key); err != nil {
		return hybridlimit.Result{}, err
	}
	if g.layout == Time {
		now := g.clock()
		j := window(now, limit.Period, s)
		return g.parts.AllowAt(ctx, now, PartKey(key, j, s), limit, cost)
	}
	if smallest := g.split(limit, s-1, s); cost > smallest.Burst && cost <= limit.Burst {
		return hybridlimit.Result{}, fmt.Errorf("sharding: %w: cost %d is more than a part's burst %d (%s split %d ways)",
			hybridlimit.ErrCostExceedsBurst, cost, smallest.Burst, limit, s)
	}
	start := int(g.next.Add(1) % uint64(s))
	now := time.Now() // the parts decide by Redis TIME, whatever g.clock says
	// Every part denied: Remaining sums what the parts asked have left (a
	// part skipped for its remembered denial counts 0, so it is a lower
	// bound), ResetAfter is the latest any part is full again.
	denial := hybridlimit.Result{Limit: limit, Source: hybridlimit.SourceGlobal}
	for i := range s {
		j := (start + i) % s
		pk := PartKey(key, j, s)
		part := g.split(limit, j, s)
		if wait, full, ok := g.denials.until(pk, part, cost, now); ok {
			denial.RetryAfter = minPositive(denial.RetryAfter, wait)
			denial.ResetAfter = max(denial.ResetAfter, full)
			continue
		}
		r, err := g.parts.AllowN(ctx, pk, part, cost)
		if err != nil {
			return hybridlimit.Result{}, err
		}
		if r.Allowed {
			g.admits.note(key, limit, j)
			r.Limit = limit
			return r, nil
		}
		g.denials.note(key, pk, part, cost, now, r.RetryAfter, r.ResetAfter)
		denial.RetryAfter = minPositive(denial.RetryAfter, r.RetryAfter)
		denial.ResetAfter = max(denial.ResetAfter, r.ResetAfter)
		denial.Remaining += r.Remaining
	}
	denial.RetryAfter = max(denial.RetryAfter, time.Microsecond)
	denial.ResetAfter = max(denial.ResetAfter, denial.RetryAfter)
	return denial, nil
}

// Refund gives back cost that a decision on key under limit took (see
// global.Limiter.Refund). For a key split in the Suffix layout it goes to
// the part that last admitted on the key, which is the decision's own
// unless others came between, and what that part has no room for to the
// next parts in turn, so the key regains the whole cost unless every part
// is full. A part given something is no longer skipped for a denial this
// Global remembers; a refund made by another process does not reach this
// memory, and a part it refilled may be skipped for as long as a denial is
// trusted, a second at most.
func (g *Global) Refund(ctx context.Context, key string, limit hybridlimit.Limit, cost int64) error {
	s, err := g.count(key, limit)
	if err != nil {
		return err
	}
	switch {
	case s == 1 && g.layout == Time:
		_, err := g.whole.RefundAt(ctx, g.clock(), key, limit, cost)
		return err
	case s == 1:
		return g.whole.Refund(ctx, key, limit, cost)
	}
	if err := checkSplitKey(key); err != nil {
		return err
	}
	if err := limit.CheckCost(cost); err != nil {
		return fmt.Errorf("sharding: %w", err)
	}
	if g.layout == Time {
		now := g.clock()
		_, err := g.parts.RefundAt(ctx, now, PartKey(key, window(now, limit.Period, s), s), limit, cost)
		return err
	}
	start := g.admits.last(key, limit, s)
	for i := 0; i < s && cost > 0; i++ {
		j := (start + i) % s
		pk, part := PartKey(key, j, s), g.split(limit, j, s)
		given, err := g.parts.Give(ctx, pk, part, min(cost, part.Burst))
		if err != nil {
			return err
		}
		if given > 0 {
			g.denials.forget(pk)
		}
		cost -= given
	}
	return nil
}

// Reset forgets key, as global.Limiter.Reset does, without knowing its
// layout: it deletes the whole key's state and that of every part of every
// shard count up to MaxShards (2,079 parts), in one pipeline, and the
// denials and admissions this Global remembers for it.
func (g *Global) Reset(ctx context.Context, key string) error {
	if g == nil || g.whole == nil {
		return fmt.Errorf("sharding: %w", hybridlimit.ErrNilClient)
	}
	names, err := g.whole.Keys(key)
	if err != nil {
		return fmt.Errorf("sharding: %w", err)
	}
	groups := [][]string{names} // the keys of one part share a slot: one DEL each
	if checkSplitKey(key) == nil {
		for s := 2; s <= MaxShards; s++ {
			for j := range s {
				ks, err := g.parts.Keys(PartKey(key, j, s))
				if err != nil {
					return fmt.Errorf("sharding: %w", err)
				}
				groups = append(groups, ks)
			}
		}
	}
	pipe := g.rdb.Pipeline()
	for _, ks := range groups {
		pipe.Del(ctx, ks...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("sharding: reset: %w: %w", hybridlimit.ErrUnavailable, err)
	}
	g.denials.forgetKey(key)
	g.admits.forgetKey(key)
	return nil
}

// Peek reports the state of key summed over its parts: Remaining is the
// sum, Allowed whether some part would admit one request, RetryAfter the
// soonest a part will, ResetAfter the latest a part is full. The parts are
// read concurrently, one call each.
func (g *Global) Peek(ctx context.Context, key string, limit hybridlimit.Limit) (hybridlimit.Result, error) {
	s, err := g.count(key, limit)
	if err != nil {
		return hybridlimit.Result{}, err
	}
	if s == 1 && g.layout == Time {
		return g.whole.PeekAt(ctx, g.clock(), key, limit, 1)
	}
	if s == 1 {
		return g.whole.Peek(ctx, key, limit)
	}
	if err := checkSplitKey(key); err != nil {
		return hybridlimit.Result{}, err
	}
	if g.layout == Time {
		now := g.clock()
		j := window(now, limit.Period, s)
		return g.parts.PeekAt(ctx, now, PartKey(key, j, s), limit, 1)
	}
	rs := make([]hybridlimit.Result, s)
	eg, ctx := errgroup.WithContext(ctx)
	for j := range s {
		eg.Go(func() error {
			r, err := g.parts.Peek(ctx, PartKey(key, j, s), g.split(limit, j, s))
			rs[j] = r
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return hybridlimit.Result{}, err
	}
	sum := hybridlimit.Result{Limit: limit, Source: hybridlimit.SourceGlobal}
	for _, r := range rs {
		sum.Remaining += r.Remaining
		sum.Allowed = sum.Allowed || r.Allowed
		if !r.Allowed {
			sum.RetryAfter = minPositive(sum.RetryAfter, r.RetryAfter)
		}
		sum.ResetAfter = max(sum.ResetAfter, r.ResetAfter)
	}
	if sum.Allowed {
		sum.RetryAfter = 0
	}
	return sum, nil
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 {
		return b
	}
	return min(a, b)
}

// denials remembers, per part, the last denial: its cost and when it said
// that cost would fit again, in a fixed number of slots: a slot holds one
// part at a time, so forgetting a denial costs a Redis call, never a wrong
// answer. A part admits no cost before the time its denial of that cost
// named, under the same limit, unless it is given tokens back: Refund and
// Reset forget what they touch, and a denial is trusted for at most
// denialMemory, so that a Refund or Reset made by another process is seen
// within that. Only the same cost is denied from memory: a larger one is
// denied too, but the wait for it is Redis's to say.
type denials struct {
	slots [256]struct {
		mu    stdsync.Mutex
		base  string // the key the part is of
		key   string
		limit hybridlimit.Limit
		cost  int64
		trust time.Time // until when the denial is trusted
		retry time.Time // when it said the cost fits
		full  time.Time // when it said the part is full again
	}
}

// denialMemory is the longest a denial is trusted: a key at its limit
// costs one Redis call per part per denialMemory at most.
const denialMemory = time.Second

func (d *denials) slot(key string) int {
	return int(hybridlimit.Slot(key)) % len(d.slots)
}

func (d *denials) note(base, key string, limit hybridlimit.Limit, cost int64, now time.Time, retry, full time.Duration) {
	s := &d.slots[d.slot(key)]
	s.mu.Lock()
	s.base, s.key, s.limit, s.cost = base, key, limit, cost
	s.trust, s.retry, s.full = now.Add(min(retry, denialMemory)), now.Add(retry), now.Add(full)
	s.mu.Unlock()
}

// until reports whether the part named key is known to deny cost under
// limit at now, and if so the waits its denial named: until the cost fits,
// and until the part is full again.
func (d *denials) until(key string, limit hybridlimit.Limit, cost int64, now time.Time) (wait, full time.Duration, ok bool) {
	s := &d.slots[d.slot(key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key != key || s.limit != limit || cost != s.cost || !now.Before(s.trust) {
		return 0, 0, false
	}
	return s.retry.Sub(now), s.full.Sub(now), true
}

// forget drops the denial of the part named key.
func (d *denials) forget(key string) {
	s := &d.slots[d.slot(key)]
	s.mu.Lock()
	if s.key == key {
		s.base, s.key = "", ""
	}
	s.mu.Unlock()
}

// forgetKey drops the denials of every part of base.
func (d *denials) forgetKey(base string) {
	for i := range d.slots {
		s := &d.slots[i]
		s.mu.Lock()
		if s.base == base {
			s.base, s.key = "", ""
		}
		s.mu.Unlock()
	}
}

// admits remembers, per key, the part that last admitted on it, in a fixed
// number of slots, so that a refund goes back where a decision was most
// likely taken. A slot holds one key at a time: a key whose slot another
// took refunds from its first part on, which loses nothing, as a full part
// passes the refund on.
type admits struct {
	slots [256]struct {
		mu    stdsync.Mutex
		key   string
		limit hybridlimit.Limit
		part  int
	}
}

func (a *admits) slot(key string) int { return int(hybridlimit.Slot(key)) % len(a.slots) }

func (a *admits) note(key string, limit hybridlimit.Limit, part int) {
	s := &a.slots[a.slot(key)]
	s.mu.Lock()
	s.key, s.limit, s.part = key, limit, part
	s.mu.Unlock()
}

// last returns the part that last admitted on key under limit split s
// ways, or 0.
func (a *admits) last(key string, limit hybridlimit.Limit, s int) int {
	sl := &a.slots[a.slot(key)]
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.key != key || sl.limit != limit || sl.part >= s {
		return 0
	}
	return sl.part
}

func (a *admits) forgetKey(key string) {
	s := &a.slots[a.slot(key)]
	s.mu.Lock()
	if s.key == key {
		s.key = ""
	}
	s.mu.Unlock()
}

// window returns the part that holds the fixed window of now under the
// Time layout. The window script counts in windows of the period rounded
// up to a microsecond, so this does too: rounded down, a period that is
// not a whole number of microseconds put one window on two parts, each
// admitting the whole quota.
func window(now time.Time, period time.Duration, parts int) int {
	us := int64((period + time.Microsecond - 1) / time.Microsecond)
	return int(now.UnixMicro() / us % int64(parts))
}
