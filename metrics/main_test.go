package metrics

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// noLeaks fails the test if it leaves goroutines behind; call it first.
func noLeaks(tb testing.TB) {
	tb.Helper()
	opt := goleak.IgnoreCurrent()
	tb.Cleanup(func() { goleak.VerifyNone(tb, opt) })
}
