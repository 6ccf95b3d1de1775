package sync

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/sharding"
)

// Mode selects how a Limiter reconciles its local allowance with Redis.
type Mode int

const (
	// Reserve (the default) takes allowance from the global bucket before
	// spending it, so the total admitted never exceeds the global budget.
	Reserve Mode = iota
	// Optimistic spends first, against the last known global remaining,
	// and reports what it spent each round. It never waits for Redis and
	// may over-admit; see WithOvershootBudget for a bound.
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

// FailurePolicy says what a decision does when Redis cannot be asked: it is
// unreachable, too slow, or the breaker keeps it off the request path.
// Allowance already held locally is spent in every policy, since Redis
// granted it.
type FailurePolicy int

const (
	// FallbackLocal (the default) enforces, on each instance, its share of
	// the limit: the limit divided by the live instance count last seen.
	FallbackLocal FailurePolicy = iota
	// FailOpen admits.
	FailOpen
	// FailClosed denies.
	FailClosed
)

func (p FailurePolicy) String() string {
	switch p {
	case FallbackLocal:
		return "fallback-local"
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// Clock tells the time. Inject one with WithClock to drive a Limiter in
// virtual time; the default is the system clock.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

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
	maxWait        time.Duration
	roundTimeout   time.Duration
	lookahead      float64
	stretch        float64
	stripeDemand   float64
	groups         int
	maxKeys        int
	prefix         string
	instanceID     string
	policy         FailurePolicy
	overshoot      float64
	lowLimit       float64
	shards         func(key string, limit hybridlimit.Limit) int
	auto           AutoShards
	perSlot        bool
	durable        struct {
		replicas int
		timeout  time.Duration
	}
	logger *slog.Logger
	clock  Clock
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
		policy:         FallbackLocal,
		overshoot:      -1,
		lowLimit:       2,
		logger:         slog.New(slog.DiscardHandler),
		clock:          systemClock{},
	}
}

// WithMode selects Reserve (the default) or Optimistic reconciling.
// Example: WithMode(sync.Optimistic).
func WithMode(m Mode) Option {
	return optionFunc(func(c *config) error {
		if m != Reserve && m != Optimistic {
			return fmt.Errorf("sync: unknown mode %d", int(m))
		}
		c.mode = m
		return nil
	})
}

// WithSyncInterval sets how often active keys are reconciled with Redis
// (default 250ms), and the jitter fraction applied to each key's next sync
// (default 0.1, so 225ms to 275ms), which keeps instances from syncing in
// lockstep. Example: WithSyncInterval(200*time.Millisecond, 0.1).
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

// WithMaxKeysPerCall bounds the keys one script call reconciles (default
// 256), which bounds how long one call blocks its Redis shard.
// Example: WithMaxKeysPerCall(100).
func WithMaxKeysPerCall(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("sync: max keys per call %d is outside [1, 10000]", n)
		}
		c.maxKeysPerCall = n
		return nil
	})
}

// WithMaxWait bounds how long a Reserve decision waits for Redis when its
// key has no local allowance left (default 100ms). After it, the decision
// is denied, or decided by the failure policy if Redis did not answer. The
// caller's ctx bounds it too. Zero means never wait: a key out of allowance
// is denied at once and refilled by the next round.
// Example: WithMaxWait(20*time.Millisecond).
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 0 || d > time.Minute {
			return fmt.Errorf("sync: max wait %v is outside [0, 1m]", d)
		}
		c.maxWait = d
		return nil
	})
}

// WithRoundTimeout bounds one reconcile round's Redis calls (default: the
// sync interval, plus the WAIT timeout under WithDurableSync, which it may
// not be shorter than). Example: WithRoundTimeout(100*time.Millisecond).
func WithRoundTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < time.Millisecond || d > time.Minute {
			return fmt.Errorf("sync: round timeout %v is outside [1ms, 1m]", d)
		}
		c.roundTimeout = d
		return nil
	})
}

// WithLeaseLookahead sizes Reserve leases: an instance holds what its
// recent demand would spend in lookahead sync intervals (default 2).
// Larger leases mean fewer on-demand fetches and more tokens idle in other
// instances' hands. Example: WithLeaseLookahead(1.5).
func WithLeaseLookahead(intervals float64) Option {
	return optionFunc(func(c *config) error {
		if !(intervals >= 0.5 && intervals <= 100) {
			return fmt.Errorf("sync: lease lookahead %v is outside [0.5, 100]", intervals)
		}
		c.lookahead = intervals
		return nil
	})
}

// WithLeaseStretch caps how many times its lease (WithLeaseLookahead) a
// Reserve key may hold while its bucket has room to spare (default 64; 1
// turns stretching off): a power of two at most n, and never more than
// lets every instance's stretched lease together stay within an eighth of
// what the bucket holds. Stretched leases let a key far under its limit
// sync every few seconds instead of every interval; the price is tokens
// at stake in a failover that loses a round's writes (up to an eighth of
// the burst, docs/design.md section 7) unless WithDurableSync is on.
// Example: WithLeaseStretch(8).
func WithLeaseStretch(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("sync: lease stretch %d is outside [1, 1024]", n)
		}
		c.stretch = float64(n)
		return nil
	})
}

// WithStripeDemand sets the demand, in tokens a second on this instance,
// above which a key's local allowance is spread over one counter per CPU
// (default 100,000; 0 spreads every key's, +Inf none). Decisions on one
// key from several CPUs at once contend for the cache line of its
// counter, which costs a hot key's decisions more than everything else
// they do; with a counter per CPU each decision writes a line its CPU
// holds. A spread key's allowance is gathered back whenever a round
// reads it, so accounting is unchanged. Example: WithStripeDemand(1e6).
func WithStripeDemand(d float64) Option {
	return optionFunc(func(c *config) error {
		if !(d >= 0) {
			return fmt.Errorf("sync: stripe demand %v is not a number of tokens a second >= 0", d)
		}
		c.stripeDemand = d
		return nil
	})
}

// WithSlotGroups sets how many hash-slot groups the keys are spread over
// (default 64). A round makes at most one script call per group per
// WithMaxKeysPerCall keys. Every instance sharing a limit must use the
// same value: it is part of the key layout. Example: WithSlotGroups(128).
func WithSlotGroups(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > hybridlimit.SlotCount {
			return fmt.Errorf("sync: slot groups %d is outside [1, %d]", n, hybridlimit.SlotCount)
		}
		c.groups = n
		return nil
	})
}

// WithCallPerSlotGroup keeps each script call of a round to one slot
// group, as a cluster client must, with any client. Without it a client
// that is not a *redis.ClusterClient (a single server, Sentinel) sends one
// call for every group's messages, up to WithMaxKeysPerCall keys, which
// cuts the commands of a round by up to the number of groups it touches.
// The simulator uses it to model a cluster on one server.
// Example: WithCallPerSlotGroup().
func WithCallPerSlotGroup() Option {
	return optionFunc(func(c *config) error {
		c.perSlot = true
		return nil
	})
}

// WithMaxKeys bounds the keys tracked in memory (default 1<<20). A new key
// beyond it is decided by the failure policy until idle keys are evicted.
// Example: WithMaxKeys(100_000).
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
// Example: WithPrefix("api:rl:").
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

// WithInstanceID names this instance in Redis (default: random). It must be
// unique among live instances; 1 to 64 of A-Z a-z 0-9 . _ -.
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
// (default FallbackLocal). Example: WithFailurePolicy(sync.FailClosed).
func WithFailurePolicy(p FailurePolicy) Option {
	return optionFunc(func(c *config) error {
		if p != FallbackLocal && p != FailOpen && p != FailClosed {
			return fmt.Errorf("sync: unknown failure policy %d", int(p))
		}
		c.policy = p
		return nil
	})
}

// WithOvershootBudget bounds Optimistic mode's over-admission: with budget
// f, the instances together admit at most f x Burst more than the global
// bucket holds per sync round, because each may spend only its share of the
// last known remaining plus f x Burst / live instances. Without it each
// instance may spend the whole remaining, the Gubernator and WSO2 model.
// Example: WithOvershootBudget(0.05) for at most 5% of a burst per round.
func WithOvershootBudget(f float64) Option {
	return optionFunc(func(c *config) error {
		if !(f >= 0 && f <= 10) {
			return fmt.Errorf("sync: overshoot budget %v is outside [0, 10]", f)
		}
		c.overshoot = f
		return nil
	})
}

// WithLowLimitThreshold sets the low-limit rule (default 2): a key whose
// limit adds fewer than this many tokens per instance per sync interval
// (Rate x interval / Period / live instances) holds no lease ahead of
// demand; each request fetches exactly its cost, which is exact per-request
// limiting at the price of one Redis round trip, coalesced with others.
// Example: WithLowLimitThreshold(5).
func WithLowLimitThreshold(tokens float64) Option {
	return optionFunc(func(c *config) error {
		if !(tokens >= 0 && tokens <= 1e6) {
			return fmt.Errorf("sync: low-limit threshold %v is outside [0, 1e6]", tokens)
		}
		c.lowLimit = tokens
		return nil
	})
}

// WithShards splits hot keys over several hash slots (Reserve mode only):
// shards returns how many parts a key gets, 1 for a whole key, at most
// sharding.MaxShards, and must answer alike in every instance. A split
// key's global bucket becomes that many buckets, each with its share of
// the limit (sharding.Part) in a slot group of its own, spread over the
// slot range and so over the masters of a cluster; each instance leases
// from its home part (sharding.Home) and falls over to the others when it
// runs dry, so the parts' traffic, and their load on Redis, spreads over
// the instances. A request's cost must fit in one part's burst. Results
// report Remaining summed over the parts. A key keeps its shard count while
// it stays in memory under one limit; a change starts its parts afresh, as
// full buckets, so the key may admit up to one more burst at the change.
// Example: WithShards(func(key string, _ hybridlimit.Limit) int {
// if key == "sale" { return 4 }; return 1 }).
func WithShards(shards func(key string, limit hybridlimit.Limit) int) Option {
	return optionFunc(func(c *config) error {
		if shards == nil {
			return errors.New("sync: nil shard-count function")
		}
		c.shards = shards
		return nil
	})
}

// WithAutoShards splits hot keys automatically (Reserve mode only): a
// key whose sync messages from all instances exceed a.Above per second is
// split into a.Max parts (see WithShards for what a split key does), and
// merged back to its configured layout after a.Hold below a.Below. Hot keys
// are found by a fixed-size sketch of the messages each instance sends;
// the layout lives in Redis, so every instance follows the one that moved
// the key, and a move carries every token over: none is lost or made (see
// docs/design.md). Example: WithAutoShards(sync.AutoShards{Max: 4, Above: 200}).
func WithAutoShards(a AutoShards) Option {
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

// WithDurableSync makes every sync call wait until replicas replicas have
// its writes (Redis WAIT on the same connection, within timeout) before
// its reply counts: a grant is spent only once a failover can no longer
// lose it, which closes the over-admission window of asynchronous
// replication (docs/design.md section 7) at the price of a replication
// round trip per round. A call not acknowledged in time counts as failed:
// its messages go again next round, idempotently, and the failure policy
// applies while it lasts. With a cluster client each node's calls go
// through that node's own client, so that WAIT follows them.
// Example: WithDurableSync(1, 50*time.Millisecond).
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

// WithLogger sends the limiter's few log lines (breaker switches, failed
// rounds) to l. The default discards them. Example: WithLogger(slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errors.New("sync: nil logger")
		}
		c.logger = l
		return nil
	})
}

// WithClock replaces the system clock, for virtual-time simulation and
// tests. Example: WithClock(fakeClock).
func WithClock(clk Clock) Option {
	return optionFunc(func(c *config) error {
		if clk == nil {
			return errors.New("sync: nil clock")
		}
		c.clock = clk
		return nil
	})
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
