package sync

import (
	stdsync "sync"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
)

// TEMPORARY until local.Table lands.
type tmpTable struct {
	mu stdsync.Mutex
	m  map[string]*local.Bucket
}

func newTmpTable() *tmpTable { return &tmpTable{m: map[string]*local.Bucket{}} }

func (t *tmpTable) AllowN(key string, now time.Time, limit hybridlimit.Limit, n int64) (hybridlimit.Result, error) {
	t.mu.Lock()
	b := t.m[key]
	if b == nil || b.Limit() != limit {
		var err error
		b, err = local.NewBucket(limit)
		if err != nil {
			t.mu.Unlock()
			return hybridlimit.Result{}, err
		}
		t.m[key] = b
	}
	t.mu.Unlock()
	return b.TakeN(now, n)
}
