package sync

import (
	"context"
	"testing"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestOutOfAllowancePaysFromALateReply: a decision that gives up at its
// max wait ends its wait as the reply comes, and the reply can land after
// the decision last tried to pay; it then finds Redis answered and nothing
// in flight, and the limit's allowance in hand. It must pay from it, not
// deny as if Redis had granted nothing.
func TestOutOfAllowancePaysFromALateReply(t *testing.T) {
	l, err := New(redistest.Standalone(t), WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	limit := hybridlimit.PerSecond(100)
	e, err := l.entry("k", limit, 1)
	if err != nil {
		t.Fatal(err)
	}
	l.lockGather(e) // the late reply's allowance
	e.ledger.Give(&e.avail, 5)
	l.scatterUnlock(e)
	now := l.cfg.clock.Now()
	r := l.outOfAllowance(e, limit, 2, now, hybridlimit.SourceLocal)
	if !r.Allowed || r.Remaining < 3 || e.held() != 3 {
		t.Fatalf("with 5 in hand, a cost of 2: %+v, %d in hand; want admitted, 3 in hand", r, e.held())
	}
	if r := l.outOfAllowance(e, limit, 4, now, hybridlimit.SourceLocal); r.Allowed || r.RetryAfter <= 0 || e.held() != 3 {
		t.Fatalf("with 3 in hand, a cost of 4: %+v, %d in hand; want denied, nothing taken", r, e.held())
	}
}
