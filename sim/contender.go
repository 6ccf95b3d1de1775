package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// A Contender is a rate limiter from outside this module that a live run
// measures beside the strategies: on the same arrivals, decided by the same
// workers and timed the same way, against the same oracle. It runs once
// per report, as exact does. This module depends on no other limiter, so
// whoever measures one supplies it (bench/gubernator does, for
// Gubernator).
type Contender struct {
	// Name labels its results; it names no strategy.
	Name string
	// Start starts one run's instances: Scenario.Instances of them, each
	// enforcing Scenario.Limit on every key, ready to decide.
	Start func(ctx context.Context, sc Scenario) (ContenderRun, error)
}

// ContenderRun is one live run of a Contender. A run's workers call Allow
// concurrently.
type ContenderRun interface {
	// Allow decides one request of cost 1 for key on instance inst, in
	// [0, Scenario.Instances).
	Allow(ctx context.Context, inst int, key string) (bool, error)
	// Calls returns the network calls its parts have made since Start:
	// every request one part sent another over the network, the workers'
	// to the instances included.
	Calls(ctx context.Context) (int64, error)
	// Close stops the instances.
	Close() error
}

func checkContenders(cs []Contender) error {
	var names []string
	for _, c := range cs {
		switch {
		case c.Name == "" || c.Start == nil:
			return errors.New("sim: a contender needs a name and a Start")
		case slices.Contains(Strategies(), Strategy(c.Name)):
			return fmt.Errorf("sim: contender %q has a strategy's name", c.Name)
		case slices.Contains(names, c.Name):
			return fmt.Errorf("sim: contender %q listed twice", c.Name)
		}
		names = append(names, c.Name)
	}
	return nil
}
