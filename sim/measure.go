package sim

import (
	"cmp"
	"slices"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// accuracy is how a strategy's admissions compare with the oracle's over
// one arrival stream.
type accuracy struct {
	Decisions      int64
	Admitted       int64
	OracleAdmitted int64
	// Overshoot is the sum over keys of max(0, admitted - oracle), divided
	// by the oracle's total: the share of admissions an exact limiter would
	// have refused.
	Overshoot float64
	// Undershoot is the same the other way: false rejections.
	Undershoot float64
	// WorstWindow is the largest excess, over keys and over closed windows
	// of one period, of the admissions above what a token bucket can ever
	// admit in such a window (Burst + Rate), relative to that bound; 0 when
	// no window exceeds it. It is blind to excess that stays within that
	// bound per period, such as 1.9 x Burst at one instant or 1.9 x Rate
	// sustained; Overshoot counts those.
	WorstWindow float64
	// MostOverBound is the most tokens one key was admitted above B + r d:
	// what any token bucket under the limit can admit in a stream of
	// length d, so an excess no timing of the arrivals explains; 0 when
	// no key went above it.
	MostOverBound float64
	// perKey holds each key's admitted and oracle counts, for diagnostics.
	perKey []keyCount
}

// keyCount is one key's admissions by a strategy and by the oracle.
type keyCount struct {
	Key              int
	Demand           int64
	Admitted, Oracle int64
}

// measure compares a strategy's decisions with the oracle's, request by
// request of the same stream (in time order), d long.
func measure(reqs []request, keys int, limit hybridlimit.Limit, d time.Duration, admitted, oracle []bool) accuracy {
	per := make([]keyCount, keys)
	times := make([][]int64, keys)
	a := accuracy{Decisions: int64(len(reqs))}
	for i, r := range reqs {
		k := &per[r.Key]
		k.Demand++
		if admitted[i] {
			k.Admitted++
			a.Admitted++
			times[r.Key] = append(times[r.Key], r.At)
		}
		if oracle[i] {
			k.Oracle++
			a.OracleAdmitted++
		}
	}
	for i := range per {
		per[i].Key = i
	}
	a.Overshoot, a.Undershoot = overshootRatios(per)
	for _, ts := range times {
		a.WorstWindow = max(a.WorstWindow, worstWindowOvershoot(ts, limit))
	}
	bound := float64(limit.Burst) + float64(limit.Rate)*float64(d)/float64(limit.Period)
	for _, k := range per {
		a.MostOverBound = max(a.MostOverBound, float64(k.Admitted)-bound)
	}
	a.perKey = per
	return a
}

// overshootRatios returns the sums over keys of max(0, admitted - oracle)
// and of max(0, oracle - admitted), each divided by the oracle's total
// (0 when the oracle admitted nothing).
func overshootRatios(per []keyCount) (over, under float64) {
	var o, u, total int64
	for _, k := range per {
		total += k.Oracle
		if d := k.Admitted - k.Oracle; d > 0 {
			o += d
		} else {
			u -= d
		}
	}
	if total == 0 {
		return 0, 0
	}
	return float64(o) / float64(total), float64(u) / float64(total)
}

// worstWindowOvershoot returns, for one key's admission times (sorted, in
// nanoseconds), the largest (n - Burst - Rate) / (Burst + Rate) over closed
// windows [t, t+Period] holding n admissions, floored at 0. A token bucket
// holds at most Burst tokens at t and gains Rate by t+Period, so no exact
// limiter exceeds that bound in any such window.
func worstWindowOvershoot(times []int64, limit hybridlimit.Limit) float64 {
	bound := limit.Burst + limit.Rate
	if int64(len(times)) <= bound {
		return 0
	}
	period := int64(limit.Period)
	most, i := 0, 0
	for j, t := range times {
		for t-times[i] > period {
			i++
		}
		most = max(most, j-i+1)
	}
	return max(0, float64(int64(most)-bound)/float64(bound))
}

// topKeys returns the n keys with the largest admitted - oracle (by, > 0
// for overshoot) or oracle - admitted (by < 0), largest first, ties by key.
func topKeys(per []keyCount, n int, by int) []keyCount {
	var out []keyCount
	for _, k := range per {
		if d := (k.Admitted - k.Oracle) * int64(by); d > 0 {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b keyCount) int {
		da, db := (a.Admitted-a.Oracle)*int64(by), (b.Admitted-b.Oracle)*int64(by)
		if c := cmp.Compare(db, da); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out[:min(n, len(out))]
}
