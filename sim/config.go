package sim

import (
	"errors"
	"fmt"
	"time"
)

// Config is what a simulation runs: a scenario, the strategies and sync
// intervals to compare on it, and how.
type Config struct {
	Scenario   Scenario
	Strategies []Strategy
	// Intervals are the sync intervals of the strategies that sync; the
	// others run once.
	Intervals []time.Duration
	// RTT is the network round trip virtual mode models: a sync round's
	// reply arrives RTT after its request; at 0, at once. DefaultRTT is
	// the usual value.
	RTT time.Duration
	// Parallel bounds the virtual runs going at once (default GOMAXPROCS:
	// a run keeps one core busy, its engine and the goroutine deciding
	// for it taking turns). Runs share nothing, so the report does not
	// depend on it.
	Parallel int
	// Detail counts, for Report.WriteDiag, the commands and sync messages
	// carrying each Redis key in virtual mode; in live mode only the
	// commands, for the hottest key's messages on each node. It slows a
	// run a little.
	Detail bool
	// Standalone makes virtual mode model one Redis server rather than a
	// cluster of ModelMasters masters: a sync round sends one script call
	// for all its messages instead of one per master.
	Standalone bool
	// Linger is the hybrid limiters' fetch linger (sync.Tuning.FetchLinger;
	// 0, the default, is none).
	Linger time.Duration
	// Progress, if set, is called after each run, one call at a time.
	Progress func(done, total int, r Result)
}

// DefaultRTT is the round trip cmd/sim models unless told otherwise (-rtt).
const DefaultRTT = time.Millisecond

func (c *Config) check() error {
	if err := c.Scenario.Validate(); err != nil {
		return err
	}
	if len(c.Strategies) == 0 {
		return errors.New("sim: no strategy to run")
	}
	for _, s := range c.Strategies {
		if s.Synced() && len(c.Intervals) == 0 {
			return fmt.Errorf("sim: strategy %s needs at least one sync interval", s)
		}
	}
	for _, iv := range c.Intervals {
		if iv < time.Millisecond || iv > time.Minute {
			return fmt.Errorf("sim: sync interval %v is outside [1ms, 1m]", iv)
		}
	}
	if c.RTT < 0 || c.RTT > 10*time.Second {
		return fmt.Errorf("sim: rtt %v is outside [0, 10s]", c.RTT)
	}
	return nil
}
