package sync_test

import (
	"context"
	"strconv"
	stdsync "sync"
	"sync/atomic"
	"testing"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// BenchmarkLimiterAllow measures a decision on a hot key with local
// allowance: the request path the hybrid exists for. The limit is large
// enough that the background loop keeps the allowance topped up.
func BenchmarkLimiterAllow(b *testing.B) {
	c := redistest.Standalone(b)
	l, err := hlsync.New(c, hlsync.WithPrefix(redistest.Prefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Start(); err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
	limit := hybridlimit.PerSecond(1 << 40)
	ctx := context.Background()
	if _, err := l.Allow(ctx, "hot", limit); err != nil {
		b.Fatal(err)
	}
	var denied atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, _ := l.Allow(ctx, "hot", limit)
			if !r.Allowed {
				denied.Add(1)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
}

// BenchmarkSyncMapBaseline is the obvious design: a sync.Map lookup of one
// hot key plus one atomic add, measured for comparison in the same run.
func BenchmarkSyncMapBaseline(b *testing.B) {
	var m stdsync.Map
	for i := range 1000 {
		m.Store(strconv.Itoa(i), new(atomic.Int64))
	}
	m.Store("hot", new(atomic.Int64))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v, _ := m.Load("hot")
			v.(*atomic.Int64).Add(-1)
		}
	})
}
