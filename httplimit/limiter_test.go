package httplimit

import (
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

func TestLocalSource(t *testing.T) {
	loc := newLocal(t)
	t0 := time.Unix(1_700_000_000, 0)
	limit := hybridlimit.PerMinute(1)
	for i, want := range []bool{true, false} {
		r, err := loc.AllowNAt(context.Background(), t0, "k", limit, 1)
		if err != nil || r.Allowed != want || r.Source != hybridlimit.SourceLocal {
			t.Errorf("AllowNAt #%d = %+v, %v; want allowed %v from local", i, r, err, want)
		}
	}
	if r, err := loc.AllowNAt(context.Background(), t0, "", limit, 1); err == nil || r.Source != hybridlimit.SourceUnknown {
		t.Errorf("AllowNAt with an empty key = %+v, %v; want an error and no source", r, err)
	}
}
