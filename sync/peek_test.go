package sync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// TestPeek reads a key's state as the instance knows it, spending
// nothing: full before any decision, then what the decisions reported,
// and empty with a retry time once Redis said so.
func TestPeek(t *testing.T) {
	redistest.NoLeaks(t)
	l, err := hlsync.New(redistest.Standalone(t), hlsync.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := hybridlimit.PerMinute(10) // a low limit: decided per request in Redis
	peek := func() hybridlimit.Result {
		t.Helper()
		r, err := l.Peek(ctx, "k", limit)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := peek(); !r.Allowed || r.Remaining != 10 || r.Limit != limit {
		t.Errorf("Peek of an untracked key = %+v, want allowed with 10 left", r)
	}
	var last hybridlimit.Result
	for range 4 {
		if last, err = l.Allow(ctx, "k", limit); err != nil || !last.Allowed {
			t.Fatalf("Allow = %+v, %v", last, err)
		}
	}
	for range 2 { // twice: Peek spends nothing
		if r := peek(); !r.Allowed || r.Remaining != last.Remaining || r.Remaining != 6 {
			t.Errorf("Peek after 4 admitted = %+v, want allowed with 6 left, as the last decision said (%d)", r, last.Remaining)
		}
	}
	for range 6 {
		if _, err := l.Allow(ctx, "k", limit); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := l.Allow(ctx, "k", limit); err != nil || r.Allowed {
		t.Fatalf("11th Allow = %+v, %v; want denied", r, err)
	}
	if r := peek(); r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 || r.RetryAfter > 6*time.Second {
		t.Errorf("Peek of an emptied key = %+v, want denied, 0 left, a retry within 6s", r)
	}
	if _, err := l.Peek(ctx, "", limit); !errors.Is(err, hybridlimit.ErrInvalidKey) {
		t.Errorf("Peek of an empty key = %v, want ErrInvalidKey", err)
	}
	if _, err := l.Peek(ctx, "k", hybridlimit.Limit{}); !errors.Is(err, hybridlimit.ErrInvalidLimit) {
		t.Errorf("Peek with a zero limit = %v, want ErrInvalidLimit", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Peek(ctx, "k", limit); !errors.Is(err, hlsync.ErrClosed) {
		t.Errorf("Peek after Close = %v, want ErrClosed", err)
	}
}
