package ruleset

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/hybridlimit/hybridlimit"
)

// TestDecide: the one decision loop, under each front end's options. Each
// application is an answer; asked[i] records the spend flag it was asked
// with, "-" for not asked.
func TestDecide(t *testing.T) {
	rec := &refundRecorder{}
	lim := hybridlimit.PerSecond(10)
	spent := func(cost int64) Answer {
		return Answer{Spent: Spend{Limiter: rec, Key: "k", Limit: lim, Cost: cost}}
	}
	deny := Answer{Denied: true}
	failErr := errors.New("store down")
	tests := []struct {
		name     string
		apps     []Answer
		errAt    int // index whose ask fails, -1 for none
		opts     DecideOptions
		asked    string
		rejected bool
		given    []int64
	}{
		{"all admit", []Answer{spent(1), spent(2)}, -1, DecideOptions{}, "SS", false, nil},
		{"stop after a denial", []Answer{spent(1), deny, spent(2)}, -1, DecideOptions{After: AfterStop}, "SS-", true, []int64{1}},
		{"peek after a denial", []Answer{spent(1), deny, {}}, -1, DecideOptions{After: AfterPeek}, "SSp", true, []int64{1}},
		{"shadow denial rejects nothing", []Answer{{Denied: true, Shadow: true}, spent(3)}, -1, DecideOptions{}, "SS", false, nil},
		{"halt rejects and stops", []Answer{spent(1), {Halt: true}, spent(2)}, -1, DecideOptions{After: AfterPeek}, "SS-", true, []int64{1}},
		{"one quota denial of two", []Answer{{Denied: true, Quota: true}, {Quota: true}, spent(1)}, -1, DecideOptions{After: AfterPeek}, "SSS", false, nil},
		{"every quota denies", []Answer{{Denied: true, Quota: true}, spent(2), {Denied: true, Quota: true}}, -1, DecideOptions{After: AfterPeek}, "SSS", true, []int64{2}},
		{"a quota shadow keeps quota from rejecting", []Answer{{Denied: true, Quota: true}, {Denied: true, Quota: true, Shadow: true}}, -1, DecideOptions{}, "SS", false, nil},
		{"global shadow spends and keeps", []Answer{deny, spent(1), spent(2)}, -1, DecideOptions{After: AfterPeek, CountAll: true}, "SSS", true, nil},
		{"error keeps what was spent", []Answer{spent(1), {}}, 1, DecideOptions{}, "SS", false, nil},
		{"error gives back on request", []Answer{spent(1), {}}, 1, DecideOptions{GiveBackOnError: true}, "SS", false, []int64{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec.given = nil
			asked := bytes.Repeat([]byte("-"), len(tt.apps))
			var done []int
			rejected, err := Decide(context.Background(), len(tt.apps), tt.opts, func(i int, spend bool) (Answer, error) {
				asked[i] = 'p'
				if spend {
					asked[i] = 'S'
				}
				if i == tt.errAt {
					return Answer{}, failErr
				}
				return tt.apps[i], nil
			}, func(i int, err error) {
				if err != nil {
					t.Errorf("give-back of %d: %v", i, err)
				}
				done = append(done, i)
			})
			if (tt.errAt >= 0) != errors.Is(err, failErr) {
				t.Fatalf("err = %v", err)
			}
			if string(asked) != tt.asked || rejected != tt.rejected || !slices.Equal(rec.given, tt.given) {
				t.Errorf("asked %s rejected %v given %v; want %s %v %v", asked, rejected, rec.given, tt.asked, tt.rejected, tt.given)
			}
			if len(done) != len(tt.given) {
				t.Errorf("done told of %v, want %d give-backs", done, len(tt.given))
			}
		})
	}
}
