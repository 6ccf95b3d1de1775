package bench

import (
	"sync/atomic"
	"testing"
)

// denials counts decisions that were refused. The benchmarks set limits no
// decision should reach, so a refusal means the figure measures something
// other than the admitting path. Only a refusal touches the counter, so it
// costs the hot path nothing.
type denials struct{ atomic.Int64 }

// check fails the benchmark if any decision was refused.
func (d *denials) check(b *testing.B) {
	b.Helper()
	if n := d.Load(); n > 0 {
		b.Fatalf("%d of %d decisions denied under a limit none should reach", n, b.N)
	}
}
