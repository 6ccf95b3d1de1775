package sim

import (
	"fmt"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/local"
)

// runOracle returns, for each request of a stream in time order, whether one
// exact token bucket per key (local.Core, the pure core every local bucket
// runs) admits it when it sees the whole merged stream, at the same times
// and costs. It is the reference every strategy is measured against: what
// a single, perfectly informed limiter would have admitted.
func runOracle(reqs []request, keys int, limit hybridlimit.Limit) ([]bool, error) {
	cores := make([]local.Core, keys)
	made := make([]bool, keys)
	out := make([]bool, len(reqs))
	for i, r := range reqs {
		k := r.Key
		if !made[k] {
			c, err := local.NewCore(limit, r.At) // a full bucket
			if err != nil {
				return nil, fmt.Errorf("sim: oracle: %w", err)
			}
			cores[k], made[k] = c, true
		}
		res, err := cores[k].Take(r.At, 1)
		if err != nil {
			return nil, fmt.Errorf("sim: oracle: %w", err)
		}
		out[i] = res.Allowed
	}
	return out, nil
}
