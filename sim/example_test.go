package sim_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/sim"
)

// A small virtual run: one key asks 300 times a second of a 100/s limit
// spread over two instances, for two seconds. The exact strategy matches
// the oracle; local, each instance enforcing half the limit, rejects some
// requests the oracle admits when the load balancer is uneven.
func ExampleRunVirtual() {
	sc := sim.DefaultScenario(sim.SkewedLB)
	sc.Instances, sc.Keys, sc.Rate, sc.Duration, sc.Skew = 2, 1, 300, 2*time.Second, 0.8
	sc.Limit = hybridlimit.PerSecond(100)
	rep, err := sim.RunVirtual(context.Background(), sim.Config{
		Scenario:   sc,
		Strategies: []sim.Strategy{sim.Exact, sim.Local},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = rep.WriteTable(os.Stdout)
	// Output:
	// strategy  sync  decisions  admitted  oracle  overshoot  undershoot  worst window  redis cmds  cmds/decision  hottest slot
	//      exact     -        604       299     299      0.00%       0.00%         0.00%         605         1.0017       100.00%
	//      local     -        604       262     299      0.00%      12.37%         0.00%           0         0.0000         0.00%
}
