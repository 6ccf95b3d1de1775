package ruleset

import (
	"context"
	"errors"
	"testing"

	"github.com/hybridlimit/hybridlimit"
)

// refundRecorder takes refunds, or fails them with err.
type refundRecorder struct {
	fake
	err   error
	given []int64
}

func (r *refundRecorder) Refund(_ context.Context, _ string, _ hybridlimit.Limit, cost int64) error {
	if r.err != nil {
		return r.err
	}
	r.given = append(r.given, cost)
	return nil
}

// TestGiveBack: each spend goes back to its limiter, in order; a limiter
// without Refund says ErrNoRefund, a failing one its error.
func TestGiveBack(t *testing.T) {
	ok, broken := &refundRecorder{}, &refundRecorder{err: errors.New("down")}
	lim := hybridlimit.PerSecond(10)
	spends := []Spend{
		{Limiter: ok, Key: "a", Limit: lim, Cost: 2},
		{Limiter: fake{}, Key: "b", Limit: lim, Cost: 1},
		{Limiter: broken, Key: "c", Limit: lim, Cost: 3},
		{Limiter: ok, Key: "d", Limit: lim, Cost: 4},
	}
	var got []error
	GiveBack(context.Background(), spends, func(i int, err error) {
		if i != len(got) {
			t.Errorf("done(%d) after %d calls", i, len(got))
		}
		got = append(got, err)
	})
	if len(got) != 4 || got[0] != nil || !errors.Is(got[1], ErrNoRefund) || got[2] == nil || got[2] != broken.err || got[3] != nil {
		t.Errorf("GiveBack errors = %v", got)
	}
	if len(ok.given) != 2 || ok.given[0] != 2 || ok.given[1] != 4 {
		t.Errorf("given back %v, want [2 4]", ok.given)
	}
}
