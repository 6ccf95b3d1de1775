package redistest

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Load keeps goroutines making decisions while a test injects a fault, and
// records when each decision ended and how, so that the test can tell how
// long callers saw errors, when the first success after an event came, and
// what was admitted in any stretch of time.
type Load struct {
	start   time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	records []Decision
}

// Decision is one decision of a Load: when it ended, whether it was
// admitted, and its error.
type Decision struct {
	At      time.Time
	Allowed bool
	Err     error
}

// StartLoad starts workers goroutines, each calling decide in a loop until
// Stop. Stop lets a decision in progress finish (decide bounds it with its
// own timeout), so that every decision that reached Redis is recorded.
func StartLoad(workers int, decide func(ctx context.Context) (allowed bool, err error)) *Load {
	l := &Load{start: time.Now(), stop: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			var mine []Decision
			defer func() {
				l.mu.Lock()
				l.records = append(l.records, mine...)
				l.mu.Unlock()
			}()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				ok, err := decide(context.Background())
				mine = append(mine, Decision{At: time.Now(), Allowed: ok, Err: err})
				if err != nil {
					time.Sleep(time.Millisecond) // no busy loop on a dead server
				}
			}
		}()
	}
	return l
}

// Stop ends the load, waits for its goroutines, and returns the decisions
// in the order they ended. It must be called once.
func (l *Load) Stop() LoadResult {
	close(l.stop)
	l.wg.Wait()
	slices.SortFunc(l.records, func(a, b Decision) int { return a.At.Compare(b.At) })
	return LoadResult{Start: l.start, Decisions: l.records}
}

// LoadResult is what a Load recorded.
type LoadResult struct {
	Start     time.Time
	Decisions []Decision
}

// Admitted returns the decisions admitted in all and those that ended in
// [from, to).
func (r LoadResult) Admitted(from, to time.Time) (all, between int64) {
	for _, d := range r.Decisions {
		if !d.Allowed {
			continue
		}
		all++
		if !d.At.Before(from) && d.At.Before(to) {
			between++
		}
	}
	return all, between
}

// Errors returns the decisions that failed, the first error, and the time
// from the first failure to the last (0 without failures).
func (r LoadResult) Errors() (n int, first error, span time.Duration) {
	var from, to time.Time
	for _, d := range r.Decisions {
		if d.Err == nil {
			continue
		}
		if n == 0 {
			first, from = d.Err, d.At
		}
		n++
		to = d.At
	}
	return n, first, to.Sub(from)
}

// Recovered returns the end of the first decision without error after the
// last failed one (the first of all if none failed), and false if the load
// ended failing.
func (r LoadResult) Recovered() (time.Time, bool) {
	last := -1
	for i, d := range r.Decisions {
		if d.Err != nil {
			last = i
		}
	}
	if last+1 < len(r.Decisions) {
		return r.Decisions[last+1].At, true
	}
	return time.Time{}, false
}
