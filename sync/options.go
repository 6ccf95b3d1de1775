package sync

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/sharding"
	"github.com/hybridlimit/hybridlimit/sync/internal/account"
)

// Mode selects how a Limiter reconciles with Redis (docs/design.md 6.2).
type Mode int

const (
	// Reserve (the default) takes allowance from the global bucket
	// before spending it: the instances never admit more than it holds.
	Reserve Mode = iota
	// Optimistic spends first and reports each round: a synced key never
	// waits for Redis, and the instances may over-admit (see
	// WithOvershootBudget, and docs/design.md 6.3 for when to choose it).
	Optimistic
)

func (m Mode) String() string {
	switch m {
	case Reserve:
		return "reserve"
	case Optimistic:
		return "optimistic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Option configures a Limiter.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	mode           Mode
	interval       time.Duration
	jitter         float64
	maxKeysPerCall int
	linger         time.Duration
	maxWait        time.Duration
	roundTimeout   time.Duration
	lookahead      float64
	stretch        float64
	stripeDemand   float64
	groups         int
	maxKeys        int
	prefix         string
	instanceID     string
	policy         hybridlimit.FailurePolicy
	overshoot      float64
	lowLimit       float64
	shards         func(key string, limit hybridlimit.Limit) int
	auto           AutoSplit
	durable        durability
	logger         *slog.Logger
	clock          Clock
}

func defaults() config {
	return config{
		mode:           Reserve,
		interval:       250 * time.Millisecond,
		jitter:         0.1,
		maxKeysPerCall: 256,
		maxWait:        100 * time.Millisecond,
		lookahead:      2,
		stretch:        64,
		stripeDemand:   defaultStripeDemand,
		groups:         64,
		maxKeys:        1 << 20,
		prefix:         hybridlimit.DefaultPrefix,
		policy:         hybridlimit.FallbackLocal,
		overshoot:      -1,
		lowLimit:       2,
		logger:         slog.New(slog.DiscardHandler),
		clock:          systemClock{},
	}
}

// WithMode selects Reserve (the default) or Optimistic.
func WithMode(m Mode) Option {
	return optionFunc(func(c *config) error {
		if m != Reserve && m != Optimistic {
			return fmt.Errorf("sync: unknown mode %d", int(m))
		}
		c.mode = m
		return nil
	})
}

// WithSyncInterval sets how often active keys reconcile with Redis
// (default 250ms, 1ms to 1m) and by how much each key's next sync varies
// (default 0.1: 225ms to 275ms), which keeps instances out of lockstep.
func WithSyncInterval(d time.Duration, jitter float64) Option {
	return optionFunc(func(c *config) error {
		if d < time.Millisecond || d > time.Minute {
			return fmt.Errorf("sync: sync interval %v is outside [1ms, 1m]", d)
		}
		if !(jitter >= 0 && jitter <= 0.5) {
			return fmt.Errorf("sync: jitter %v is outside [0, 0.5]", jitter)
		}
		c.interval, c.jitter = d, jitter
		return nil
	})
}

// WithMaxWait bounds how long a Reserve decision out of allowance waits for
// Redis (default 100ms, at most 1m; 0 never waits), as ctx does. Then it is
// denied, or decided by the failure policy if Redis did not answer.
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 0 || d > time.Minute {
			return fmt.Errorf("sync: max wait %v is outside [0, 1m]", d)
		}
		c.maxWait = d
		return nil
	})
}

// WithRoundTimeout bounds one round's Redis calls (default the sync
// interval, plus the WAIT timeout of WithDurableSync, which it may not be
// shorter than).
func WithRoundTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < time.Millisecond || d > time.Minute {
			return fmt.Errorf("sync: round timeout %v is outside [1ms, 1m]", d)
		}
		c.roundTimeout = d
		return nil
	})
}

// Tuning holds knobs whose defaults suit almost every deployment: change
// one only where a measurement (cmd/sim, the benchmarks) says so. A zero
// field keeps its default.
type Tuning struct {
	LeaseLookahead float64 // sync intervals of demand a Reserve lease holds (default 2, 0.5 to 100)
	// LeaseStretch caps the times its lease a Reserve key far under its
	// limit holds (default 64, to 1024; 1 is off): all instances' stretched
	// leases stay within an eighth of the bucket, tokens at stake in a
	// failover without WithDurableSync (docs/design.md 7).
	LeaseStretch int
	// StripeDemand is the demand (tokens a second) above which a key's
	// allowance is spread over a counter per CPU (default 100,000; negative:
	// every key's; +Inf: none).
	StripeDemand   float64
	MaxKeysPerCall int // keys one script call carries (default 256, to 10,000)
	// SlotGroups is how many hash-slot groups keys spread over (default 64,
	// to 16384): part of the key layout, alike on every instance.
	SlotGroups int
	// FetchLinger is how long a decision out of allowance (a key new to
	// the instance, a low limit, a lease spent early) waits for others
	// before their keys go to Redis together, one call a node (default 0:
	// at once, or with the round in flight's successor; at most the max
	// wait). A linger makes fewer calls while many keys are new or low,
	// and makes those decisions wait that much longer: a quarter of the
	// sync interval rides every fetch on the loop's next tick.
	FetchLinger time.Duration
}

// WithTuning sets the knobs t's non-zero fields name.
func WithTuning(t Tuning) Option {
	return optionFunc(func(c *config) error {
		switch {
		case t.LeaseLookahead != 0 && !(t.LeaseLookahead >= 0.5 && t.LeaseLookahead <= 100):
			return fmt.Errorf("sync: lease lookahead %v is outside [0.5, 100]", t.LeaseLookahead)
		case t.LeaseStretch < 0 || t.LeaseStretch > 1024:
			return fmt.Errorf("sync: lease stretch %d is outside [1, 1024]", t.LeaseStretch)
		case math.IsNaN(t.StripeDemand):
			return errors.New("sync: stripe demand NaN is not a number of tokens a second")
		case t.MaxKeysPerCall < 0 || t.MaxKeysPerCall > 10000:
			return fmt.Errorf("sync: max keys per call %d is outside [1, 10000]", t.MaxKeysPerCall)
		case t.SlotGroups < 0 || t.SlotGroups > hybridlimit.SlotCount:
			return fmt.Errorf("sync: slot groups %d is outside [1, %d]", t.SlotGroups, hybridlimit.SlotCount)
		}
		if t.LeaseLookahead != 0 {
			c.lookahead = t.LeaseLookahead
		}
		if t.LeaseStretch != 0 {
			c.stretch = float64(t.LeaseStretch)
		}
		if t.StripeDemand != 0 {
			c.stripeDemand = max(t.StripeDemand, 0)
		}
		if t.MaxKeysPerCall != 0 {
			c.maxKeysPerCall = t.MaxKeysPerCall
		}
		if t.SlotGroups != 0 {
			c.groups = t.SlotGroups
		}
		if t.FetchLinger < 0 {
			return fmt.Errorf("sync: fetch linger %v is negative", t.FetchLinger)
		}
		if t.FetchLinger != 0 {
			c.linger = t.FetchLinger
		}
		return nil
	})
}

// WithMaxKeys bounds the keys tracked in memory (default 1<<20); a new key
// beyond it goes to the failure policy until idle keys are evicted.
func WithMaxKeys(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("sync: max keys %d is below 1", n)
		}
		c.maxKeys = n
		return nil
	})
}

// WithPrefix sets the prefix of every Redis key (default "hl:").
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) error {
		if _, err := hybridlimit.NewKeyspace(p); err != nil {
			return fmt.Errorf("sync: %w", err)
		}
		c.prefix = p
		return nil
	})
}

var instanceIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// WithInstanceID names this instance in Redis (default random): unique
// among live instances, 1 to 64 of [A-Za-z0-9._-].
// Example: WithInstanceID(os.Getenv("POD_NAME")).
func WithInstanceID(id string) Option {
	return optionFunc(func(c *config) error {
		if !instanceIDPattern.MatchString(id) {
			return fmt.Errorf("sync: instance id %q is not 1 to 64 of [A-Za-z0-9._-]", id)
		}
		c.instanceID = id
		return nil
	})
}

// WithFailurePolicy chooses what decisions do while Redis cannot be asked
// (unreachable, too slow, or its node's breaker open): hybridlimit's
// FallbackLocal (the default; each instance enforces its share of the
// limit), FailOpen (admit) or FailClosed (deny). Allowance held locally is
// spent under every policy: Redis granted it.
func WithFailurePolicy(p hybridlimit.FailurePolicy) Option {
	return optionFunc(func(c *config) error {
		if p != hybridlimit.FallbackLocal && p != hybridlimit.FailOpen && p != hybridlimit.FailClosed {
			return fmt.Errorf("sync: failure policy %v is not FallbackLocal, FailOpen or FailClosed", p)
		}
		c.policy = p
		return nil
	})
}

// WithOvershootBudget bounds Optimistic mode's over-admission to f x Burst
// a sync round over all instances (f from 0 to 10): each spends at most its
// share of the last known remaining plus f x Burst / live instances.
// Without it each may spend all the remaining (the Gubernator model).
func WithOvershootBudget(f float64) Option {
	return optionFunc(func(c *config) error {
		if !(f >= 0 && f <= 10) {
			return fmt.Errorf("sync: overshoot budget %v is outside [0, 10]", f)
		}
		c.overshoot = f
		return nil
	})
}

// WithLowLimitThreshold sets the low-limit rule (default 2; 0 turns it
// off): a key whose limit adds fewer tokens than this per instance per sync
// interval holds no lease, and each request fetches exactly its cost, at a
// Redis round trip coalesced with others'.
func WithLowLimitThreshold(tokens float64) Option {
	return optionFunc(func(c *config) error {
		if !(tokens >= 0 && tokens <= 1e6) {
			return fmt.Errorf("sync: low-limit threshold %v is outside [0, 1e6]", tokens)
		}
		c.lowLimit = tokens
		return nil
	})
}

// WithSplitKeys splits keys over several hash slots (Reserve mode only):
// shards says how many parts a key has, 1 (whole) to sharding.MaxShards,
// alike on every instance. Each part holds its share of the limit in a slot
// group of its own; an instance leases from its home part and falls over to
// the others, and Remaining sums them. A cost must fit in one part's burst.
// A key whose part count changes (with its limit) starts afresh with full
// parts: up to a burst more admitted (docs/design.md 8).
func WithSplitKeys(shards func(key string, limit hybridlimit.Limit) int) Option {
	return optionFunc(func(c *config) error {
		if shards == nil {
			return errors.New("sync: nil shard-count function")
		}
		c.shards = shards
		return nil
	})
}

// WithAutoSplit splits a key whose messages from all instances exceed
// a.Above a second into a.Max parts, and merges it back after a.Hold below
// a.Below (Reserve mode only). The layout lives in Redis, every instance
// follows it, and a move carries every token over (docs/design.md 8).
// Example: WithAutoSplit(sync.AutoSplit{Max: 4, Above: 200}).
func WithAutoSplit(a AutoSplit) Option {
	return optionFunc(func(c *config) error {
		if a.Max < 2 || a.Max > sharding.MaxShards {
			return fmt.Errorf("sync: auto shards: max %d is outside [2, %d]", a.Max, sharding.MaxShards)
		}
		if !(a.Above > 0 && a.Above < 1e9) {
			return fmt.Errorf("sync: auto shards: above %v is not a positive rate", a.Above)
		}
		if a.Below == 0 {
			a.Below = a.Above / 4
		}
		if !(a.Below > 0 && a.Below < a.Above) {
			return fmt.Errorf("sync: auto shards: below %v is outside (0, above)", a.Below)
		}
		if a.Hold < 0 {
			return fmt.Errorf("sync: auto shards: negative hold %v", a.Hold)
		}
		c.auto = a
		return nil
	})
}

// WithDurableSync makes a sync call's reply count only once replicas
// replicas hold its writes (WAIT, within timeout): a grant is spent only
// once a failover cannot lose it (docs/design.md 7), at a replication round
// trip a round. A call not acknowledged in time fails, and goes again.
func WithDurableSync(replicas int, timeout time.Duration) Option {
	return optionFunc(func(c *config) error {
		if replicas < 1 || replicas > 100 {
			return fmt.Errorf("sync: durable sync: replicas %d is outside [1, 100]", replicas)
		}
		if timeout < time.Millisecond || timeout > time.Minute {
			return fmt.Errorf("sync: durable sync: timeout %v is outside [1ms, 1m]", timeout)
		}
		c.durable.replicas, c.durable.timeout = replicas, timeout
		return nil
	})
}

// WithLogger sends the limiter's few log lines to l (default: discarded).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errors.New("sync: nil logger")
		}
		c.logger = l
		return nil
	})
}

// WithClock replaces the system clock, for tests and virtual time. A
// clock that is also a Driver runs the limiter's loop itself (drive.go).
func WithClock(clk Clock) Option {
	return optionFunc(func(c *config) error {
		if clk == nil {
			return errors.New("sync: nil clock")
		}
		c.clock = clk
		return nil
	})
}

// configure applies opts to the defaults and checks what they say together.
func configure(opts []Option) (config, error) {
	c := defaults()
	for _, o := range opts {
		if o == nil {
			return c, errors.New("sync: nil option")
		}
		if err := o.apply(&c); err != nil {
			return c, err
		}
	}
	c.finish()
	if c.roundTimeout < c.durable.timeout {
		return c, fmt.Errorf("sync: round timeout %v is shorter than the durable-sync WAIT timeout %v: a round would end before its replicas could answer", c.roundTimeout, c.durable.timeout)
	}
	if c.linger > c.maxWait {
		return c, fmt.Errorf("sync: fetch linger %v is longer than the max wait %v: every fetch would be given up", c.linger, c.maxWait)
	}
	if (c.shards != nil || c.auto.Max > 0) && c.mode == Optimistic {
		return c, errors.New("sync: WithSplitKeys and WithAutoSplit need Reserve mode")
	}
	if c.instanceID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.instanceID = hex.EncodeToString(b[:])
	}
	return c, nil
}

// leasePolicy returns the lease policy the configuration sets.
func (c *config) leasePolicy() account.Policy {
	return account.Policy{
		Interval:   c.interval,
		Jitter:     c.jitter,
		Lookahead:  c.lookahead,
		StretchCap: c.stretch,
		LowLimit:   c.lowLimit,
		Optimistic: c.mode == Optimistic,
	}
}

func (c *config) finish() {
	if c.auto.Max > 0 && c.auto.Hold == 0 {
		c.auto.Hold = max(40*c.interval, 30*time.Second)
	}
	if c.roundTimeout == 0 {
		// A round under durable sync waits for replicas after its scripts
		// ran; cutting it at the interval would fail every round whose
		// replication lags a little, though WAIT was given longer.
		c.roundTimeout = c.interval + c.durable.timeout
	}
	if math.IsNaN(c.jitter) {
		c.jitter = 0
	}
}
