package sharding

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

// MaxShards is the most parts a key can be split into.
const MaxShards = 64

// ErrInvalidShards is wrapped by the errors for a shard count outside
// [1, MaxShards].
var ErrInvalidShards = errors.New("sharding: invalid shard count")

// CheckShards returns an error wrapping ErrInvalidShards unless s is in
// [1, MaxShards].
func CheckShards(s int) error {
	if s < 1 || s > MaxShards {
		return fmt.Errorf("%w: %d, want 1 to %d", ErrInvalidShards, s, MaxShards)
	}
	return nil
}

// Part returns part j of limit split s ways, for the token algorithms:
// Burst is divided as evenly as whole tokens allow, the remainder going to
// the first parts, and so is Rate when it holds at least s tokens; a
// smaller Rate keeps its value over a Period s times longer (3 per second
// split 4 ways is 3 per 4 seconds each). Either way the parts add up to
// limit exactly. Use Fit first: a part of a limit that cannot be split s
// ways is not a valid limit.
func Part(limit hybridlimit.Limit, j, s int) hybridlimit.Limit {
	s = max(s, 1) // as for every helper here: fewer than one part is one
	n := int64(s)
	p := Quota(limit, j, s)
	if limit.Rate < n {
		p.Period = limit.Period * time.Duration(n)
		return p
	}
	p.Rate = Share(limit.Rate, j, s)
	return p
}

// Quota returns part j of limit split s ways, for the window algorithms,
// whose Burst is what a window of Period admits: Burst is divided as in
// Part, and Rate and Period are kept.
func Quota(limit hybridlimit.Limit, j, s int) hybridlimit.Limit {
	q := limit
	q.Burst = Share(limit.Burst, j, s)
	return q
}

// Share returns part j's share of n units divided s ways: as evenly as
// whole units allow, the remainder going to the first parts, so that the
// shares add up to n. It divides a burst (Quota), a rate (Part) and a
// charge over the parts alike.
func Share(n int64, j, s int) int64 {
	k := int64(max(s, 1))
	share := n / k
	if int64(j) < n%k {
		share++
	}
	return share
}

// Fit returns the most parts, at most s, that limit splits into while every
// part (Part) stays a valid limit: a key of burst 3 splits 3 ways at most.
func Fit(limit hybridlimit.Limit, s int) int { return fit(limit, s, Part) }

// fit returns the most parts, at most s, that split makes valid limits of.
func fit(limit hybridlimit.Limit, s int, split func(hybridlimit.Limit, int, int) hybridlimit.Limit) int {
	s = min(s, MaxShards, int(min(limit.Burst, MaxShards)))
next:
	for ; s > 1; s-- {
		for j := range s {
			if split(limit, j, s).Validate() != nil {
				continue next
			}
		}
		return s
	}
	return 1
}

// Slice returns the slice of the slot range, out of s equal ones, that
// part j of a key whose own slot is slot goes to: the key's own slice for
// part 0, the next ones for the next parts.
func Slice(slot, j, s int) int {
	s = max(s, 1)
	return (slot*s/hybridlimit.SlotCount + j) % s
}

// center returns the middle slot of slice i of s.
func center(i, s int) int {
	return (2*i + 1) * hybridlimit.SlotCount / (2 * s)
}

// Group returns the slot group of part j of s of a key whose own group is
// g, out of n groups that split the slot range evenly (group i owns the
// i-th of n slices): the parts follow g at equal steps of a 1/s of the slot
// range, so on a cluster whose masters own equal ranges they reach min(s,
// masters) masters unless a step lands within one group of a master's
// boundary (TestGroupSpreads counts how often), and the parts of
// different keys spread over all the groups rather than crowd into a few.
func Group(g, j, s, n int) int {
	s, n = max(s, 1), max(n, 1)
	slot := (g*hybridlimit.SlotCount/n + j*hybridlimit.SlotCount/s) % hybridlimit.SlotCount
	return slot * n / hybridlimit.SlotCount
}

// Home returns the part an instance draws from first, the same on every
// call: a hash of the instance and the key, so that the instances of a
// service spread over the parts of each key.
func Home(instance, key string, s int) int {
	s = max(s, 1)
	h := fnv.New32a()
	_, _ = h.Write([]byte(instance))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(s))
}

// Place returns the hash tag of part j of s for a key whose escaped form
// (hybridlimit.Escape) is tag: tag + "#" + j + "." + s + "." + n, with the
// smallest n whose slot lies within an eighth of a slice of the middle of
// the part's Slice. Masters own contiguous slot ranges, so on a cluster
// whose M masters own equal ranges the S parts of a key land on min(S, M)
// masters for M up to 3 (TestPlaceSpreads); with more masters a slice's
// middle can lie within an eighth of a slice of a master's boundary, and
// then two parts may share a master (at S = 4 on 5 masters, some keys
// reach 3; 2 to 4% of keys at S = 6 or 8 on 5 or 7 masters). The suffix after the last '#' is all digits and dots, so
// distinct keys, parts and shard counts never share a tag. Finding n takes
// about 4s CRC16 computations.
func Place(tag string, j, s int) string {
	s = max(s, 1)
	mid := center(Slice(hybridlimit.Slot(tag), j, s), s)
	reach := max(hybridlimit.SlotCount/(8*s), 16)
	buf := make([]byte, 0, len(tag)+16)
	buf = append(buf, tag...)
	buf = append(buf, '#')
	buf = strconv.AppendInt(buf, int64(j), 10)
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, int64(s), 10)
	buf = append(buf, '.')
	stem := len(buf)
	for n := 0; ; n++ {
		buf = strconv.AppendInt(buf[:stem], int64(n), 10)
		// The tag has no braces: Slot hashes all of it.
		if d := hybridlimit.Slot(string(buf)) - mid; (d <= reach && d >= -reach) || n == 1<<20 {
			return string(buf)
		}
	}
}
