package sharding

import (
	"errors"
	"testing"

	"github.com/hybridlimit/hybridlimit"
)

// TestZeroGlobal calls a zero and a nil Global (not made by NewGlobal):
// they panicked on the first call, where global.Limiter's zero value and
// nil pointer return an error wrapping hybridlimit.ErrNilClient.
func TestZeroGlobal(t *testing.T) {
	for name, g := range map[string]*Global{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s Global panicked: %v", name, p)
				}
			}()
			limit := hybridlimit.PerSecond(10)
			if _, err := g.Allow(t.Context(), "k", limit); !errors.Is(err, hybridlimit.ErrNilClient) {
				t.Errorf("%s Global: Allow = %v, want ErrNilClient", name, err)
			}
			if _, err := g.Peek(t.Context(), "k", limit); !errors.Is(err, hybridlimit.ErrNilClient) {
				t.Errorf("%s Global: Peek = %v, want ErrNilClient", name, err)
			}
			if s := g.Shards("k", limit); s != 1 {
				t.Errorf("%s Global: Shards = %d, want 1", name, s)
			}
		})
	}
}
