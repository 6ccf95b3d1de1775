package sim

import (
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// classRow is what one class of keys, by demand, cost and got in a run.
type classRow struct {
	// Name says the class's demand relative to the limit, such as
	// "over the limit" or "1-10% of it".
	Name             string
	Keys             int
	Demand           int64
	Admitted, Oracle int64
	// Messages counts, per phase, the commands that carried a key of the
	// class: a round's call carrying ten keys counts ten.
	Messages [phases]int64
	// Kinds counts the class's sync messages by phase and kind.
	Kinds msgCounts
}

// demandClasses bound the classes, as fractions of the limit's rate.
var demandClasses = []struct {
	name   string
	lo, hi float64
}{
	{"over the limit", 1, 1e300},
	{"10-100% of it", 0.1, 1},
	{"1-10% of it", 0.01, 0.1},
	{"under 1% of it", 0, 0.01},
}

// breakdown splits a run's keys into classes by their demand over the run
// relative to the limit, and sums each class's demand, admissions and the
// commands and sync messages that carried its keys. The per-key counts come
// from a run with Config.Detail; without, Messages and Kinds are zero.
func breakdown(r Result, limit hybridlimit.Limit, d time.Duration) []classRow {
	perKey := map[int][phases]int64{}
	for k, v := range r.Diag.keyCommands {
		if i, ok := callerKey(k); ok {
			m := perKey[i]
			for p := range m {
				m[p] += v[p]
			}
			perKey[i] = m
		}
	}
	kinds := map[int]msgCounts{}
	for k, v := range r.Diag.keyMessages {
		if i, ok := callerKey(k); ok {
			m := kinds[i]
			for p := range m {
				for j := range m[p] {
					m[p][j] += v[p][j]
				}
			}
			kinds[i] = m
		}
	}
	limitRate := limit.TokensIn(d) // tokens the limit adds over the run
	rows := make([]classRow, len(demandClasses))
	for i, c := range demandClasses {
		rows[i].Name = c.name
	}
	for _, k := range r.perKey {
		if k.Demand == 0 {
			continue
		}
		f := float64(k.Demand) / limitRate
		for i, c := range demandClasses {
			if f >= c.lo && f < c.hi {
				row := &rows[i]
				row.Keys++
				row.Demand += k.Demand
				row.Admitted += k.Admitted
				row.Oracle += k.Oracle
				for p, n := range perKey[k.Key] {
					row.Messages[p] += n
				}
				for p, byKind := range kinds[k.Key] {
					for j, n := range byKind {
						row.Kinds[p][j] += n
					}
				}
				break
			}
		}
	}
	return rows
}

// callerKey returns the simulator key index a Redis key belongs to: the
// bucket of a hybrid key or of one of its parts ("...}:h:k12",
// "...}:h#1.4.2:k12") or the state of an exact one
// ("...{k12}:tb"). Other keys (allowances, presence) belong to none, so
// that each message counts once.
func callerKey(redisKey string) (int, bool) {
	var name string
	if _, after, ok := strings.Cut(redisKey, "}:h"); ok {
		// A whole key's bucket, or a part's, whose kind "h" a suffix
		// "#j.s" or "#j.s.gen" follows.
		if part, key, ok := strings.Cut(after, ":"); ok && (part == "" || part[0] == '#') {
			name = key
		}
	} else if i, j := strings.IndexByte(redisKey, '{'), strings.IndexByte(redisKey, '}'); i >= 0 && j > i && strings.HasSuffix(redisKey, "}:tb") {
		name = redisKey[i+1 : j]
	}
	if !strings.HasPrefix(name, "k") {
		return 0, false
	}
	n, err := strconv.Atoi(name[1:])
	return n, err == nil
}
