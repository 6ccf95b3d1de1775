package sync

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

func BenchmarkTableGetHot(b *testing.B) {
	t := newTable()
	for i := range 1000 {
		k := string(rune('a'+i%26)) + string(rune(i))
		t.getOrInsert(k, func() *entry { return &entry{key: k} })
	}
	t.getOrInsert("hot", func() *entry { return &entry{key: "hot"} })
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if t.get("hot") == nil {
				b.Fatal("missing")
			}
		}
	})
}

func BenchmarkEntryAddHot(b *testing.B) {
	e := &entry{}
	e.avail.Store(1 << 60)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e.avail.Add(-1)
		}
	})
}

func BenchmarkFastPathNoResult(b *testing.B) {
	t := newTable()
	e, _ := t.getOrInsert("hot", func() *entry { return &entry{key: "hot"} })
	lim := hybridlimit.PerSecond(10)
	e.limit.Store(&lim)
	e.avail.Store(1 << 60)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if e := t.get("hot"); e != nil && *e.limit.Load() == lim {
				e.avail.Add(-1)
			}
		}
	})
}

var sinkResult hybridlimit.Result

func BenchmarkFastPathWithResult(b *testing.B) {
	t := newTable()
	e, _ := t.getOrInsert("hot", func() *entry { return &entry{key: "hot"} })
	lim := hybridlimit.PerSecond(10)
	e.limit.Store(&lim)
	e.avail.Store(1 << 60)
	b.RunParallel(func(pb *testing.PB) {
		var r hybridlimit.Result
		for pb.Next() {
			if e := t.get("hot"); e != nil && *e.limit.Load() == lim {
				if n := e.avail.Add(-1); n >= 0 {
					r = hybridlimit.Result{Limit: lim, Allowed: true, Source: hybridlimit.SourceLocal, Remaining: n + e.remaining.Load(), ResetAfter: time.Duration(e.resetAfter.Load())}
				}
			}
		}
		sinkResult = r
	})
}
