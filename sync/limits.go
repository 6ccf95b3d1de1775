package sync

import (
	stdsync "sync"

	"github.com/hybridlimit/hybridlimit"
)

// limits hands out one shared copy of each limit value, so that the
// entries of keys under the same limit point to one Limit instead of a
// copy each: 32 bytes less per key, and a round reading the limits of
// thousands of entries reads one cache line instead of one per key.
type limits struct {
	mu   stdsync.Mutex
	byID map[hybridlimit.Limit]*hybridlimit.Limit
}

// maxLimits bounds the copies kept for sharing. Past it the set starts
// over: a caller passing ever new limits costs a copy per entry, as
// before, but never unbounded memory.
const maxLimits = 1024

// get returns the shared copy of limit.
func (ls *limits) get(limit hybridlimit.Limit) *hybridlimit.Limit {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if p, ok := ls.byID[limit]; ok {
		return p
	}
	if ls.byID == nil || len(ls.byID) >= maxLimits {
		ls.byID = make(map[hybridlimit.Limit]*hybridlimit.Limit)
	}
	p := &limit
	ls.byID[limit] = p
	return p
}
